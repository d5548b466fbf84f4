#!/usr/bin/env python3
"""token_limits_check.py URL MODEL_DIR -- [allowed_token_ids, bad_words] vLLM's two sampling params through the official
openai client (extra_body), on a server started by token_limits.sh (random weights, the byte-level fixture tokenizer).
The expected values are not the server's own:
  - allowed_token_ids: every output id (return_token_ids) is one of the listed, whole and streamed, sampled at
    temperature 1 (unconstrained, a 3013-token vocabulary would leave the set at once); beside a choice of two phrases
    (structured_outputs) restricted to HF's token ids of the phrase the choice alone does not write greedily, the
    output is that phrase, whole and streamed; restricted to eos alone (no phrase starts there), an error naming
    allowed_token_ids;
  - bad_words: the token sequences are HF transformers' encodings of the words under vLLM's rule
    (SamplingParams.update_from_tokenizer: the word with its leading whitespace dropped, then after a space, the second
    kept when its first token differs and it has as many tokens); the greedy output with them never holds a sequence
    among its generated ids and equals the unconstrained greedy output up to the first position where that one
    completed a sequence (vLLM's bad_words.py: a word's last id is banned where the generated ids end with the rest);
  - bad input: 400 with the field named.
Prints the mismatches; exit 0 / 1."""
import sys

import openai
import requests
from transformers import AutoTokenizer

url, model_dir = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
hf = AutoTokenizer.from_pretrained(model_dir)
fails = 0
PROMPT = "Once upon a time there was a little"


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH:", what)


def ids_of(choice):
    return list((choice.model_extra or {}).get("token_ids") or [])


def complete(n_tokens=48, **extra):
    r = c.completions.create(model="m", prompt=PROMPT, max_tokens=n_tokens, temperature=0,
                             extra_body=dict(return_token_ids=True, ignore_eos=True, **extra))
    return ids_of(r.choices[0])


def vllm_bad_words(words):
    """vLLM's SamplingParams.update_from_tokenizer on HF's tokenizer"""
    out = []
    for w in words:
        for pre in (False, True):
            ids = hf.encode((" " if pre else "") + w.lstrip(), add_special_tokens=False)
            if not pre or (ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
    return out


def first_hit(ids, seqs):
    """the first position whose token completes a sequence of seqs in ids (None: none)"""
    for i in range(len(ids)):
        for s in seqs:
            if i + 1 >= len(s) and ids[i + 1 - len(s):i + 1] == s:
                return i
    return None


# ---- allowed_token_ids ----
base = complete()
check(len(base) == 48, "greedy baseline has %d ids" % len(base))
allowed = sorted(set(hf.encode(" the a of and", add_special_tokens=False)) | {base[5]})
r = c.completions.create(model="m", prompt=PROMPT, max_tokens=40, temperature=1.0, seed=3,
                         extra_body=dict(return_token_ids=True, ignore_eos=True, allowed_token_ids=allowed))
got = ids_of(r.choices[0])
check(len(got) == 40 and set(got) <= set(allowed), "allowed_token_ids %s: output %s" % (allowed, got))
free = c.completions.create(model="m", prompt=PROMPT, max_tokens=40, temperature=1.0, seed=3,
                            extra_body=dict(return_token_ids=True, ignore_eos=True))
check(not set(ids_of(free.choices[0])) <= set(allowed), "the unconstrained sample stays in the set too: the check proves nothing")
streamed = []
for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=32, temperature=1.0,
                                    seed=5, stream=True,
                                    extra_body=dict(return_token_ids=True, ignore_eos=True, allowed_token_ids=allowed)):
    for cc in ch.choices:
        streamed += ids_of(cc)
check(len(streamed) == 32 and set(streamed) <= set(allowed), "streamed chat with allowed_token_ids: %s" % streamed)
eos = hf.convert_tokens_to_ids(hf.eos_token) if hf.eos_token else None
if eos is not None:   # only the eos id: the first token ends the output, finish_reason stop
    r = c.completions.create(model="m", prompt=PROMPT, max_tokens=20, temperature=1.0,
                             extra_body=dict(return_token_ids=True, allowed_token_ids=[eos]))
    check(ids_of(r.choices[0]) == [eos] and r.choices[0].finish_reason == "stop",
          "allowed_token_ids [eos]: %s %s" % (ids_of(r.choices[0]), r.choices[0].finish_reason))

# ---- allowed_token_ids beside structured output (vLLM applies both): a choice of two phrases; greedy with the choice
# alone writes one of them, restricted to HF's tokens of the other (and eos) it must write the other ----
CHOICES = ["once more with feeling", "the little red hen"]
def choose(**extra):
    r = c.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0,
                             extra_body=dict(return_token_ids=True, structured_outputs={"choice": CHOICES}, **extra))
    return r.choices[0].text, ids_of(r.choices[0]), r.choices[0].finish_reason
text0, _, _ = choose()
check(text0 in CHOICES, "the choice alone wrote %r" % text0)
if text0 in CHOICES:
    other = CHOICES[1 - CHOICES.index(text0)]
    allowed2 = sorted(set(hf.encode(other, add_special_tokens=False)) | ({eos} if eos is not None else set()))
    text1, ids1, fin1 = choose(allowed_token_ids=allowed2)
    check(text1 == other and set(ids1) <= set(allowed2),
          "choice %r restricted to %s: wrote %r (ids %s, finish %s)" % (other, allowed2, text1, ids1, fin1))
    streamed2 = ""
    for ch in c.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                   extra_body=dict(structured_outputs={"choice": CHOICES}, allowed_token_ids=allowed2)):
        for cc in ch.choices:
            streamed2 += cc.text or ""
    check(streamed2 == text1, "streamed %r != whole %r" % (streamed2, text1))
# the two sharing no token (no phrase starts with eos): an error that says so, whole (500) and streamed (an error event)
dead = dict(model="m", prompt=PROMPT, max_tokens=8, allowed_token_ids=[eos if eos is not None else 0],
            structured_outputs={"choice": CHOICES})
r = requests.post(url + "/v1/completions", json=dead, timeout=60)
msg = ((r.json() if r.headers.get("content-type", "").startswith("application/json") else {}).get("error") or {}).get("message", "")
check(r.status_code == 500 and "allowed_token_ids" in msg, "no shared token: %d %r" % (r.status_code, msg))
r = requests.post(url + "/v1/completions", json=dict(dead, stream=True), timeout=60)
check("allowed_token_ids" in r.text and r.text.rstrip().endswith("data: [DONE]"), "no shared token, streamed: %r" % r.text[-300:])

# ---- bad_words: one-token and several-token words taken from the greedy output ----
tried = 0
for i in range(2, len(base) - 2):
    for span in (1, 2):
        text = hf.decode(base[i:i + span])
        word = text.strip()
        if not word.isalpha() or len(word) < 2:
            continue
        seqs = vllm_bad_words([word])
        at = first_hit(base, seqs)
        if at is None:
            continue
        tried += 1
        got = complete(bad_words=[word])
        check(first_hit(got, seqs) is None, "bad_words %r (sequences %s): output %s holds one" % (word, seqs, got))
        check(got[:at] == base[:at] and got[at] != base[at],
              "bad_words %r: greedy output should follow the baseline to position %d and leave it there: %s vs %s"
              % (word, at, got, base))
        if tried >= 4:
            break
    if tried >= 4:
        break
check(tried >= 2, "the greedy baseline gave only %d words to ban" % tried)
# streamed == whole, with both params and n = 2 (each choice its own sequence)
word = None
for t in base[2:]:
    w = hf.decode([t]).strip()
    if w.isalpha() and len(w) >= 2:
        word = w
        break
if word:
    whole = c.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0.8, seed=9, n=2,
                                 extra_body=dict(return_token_ids=True, ignore_eos=True, bad_words=[word]))
    parts = {0: [], 1: []}
    for ch in c.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0.8, seed=9, n=2, stream=True,
                                   extra_body=dict(return_token_ids=True, ignore_eos=True, bad_words=[word])):
        for cc in ch.choices:
            parts[cc.index] += ids_of(cc)
    seqs = vllm_bad_words([word])
    for k in range(2):
        w_ids = ids_of(whole.choices[k])
        check(w_ids == parts[k], "n=2 choice %d: streamed %s != whole %s" % (k, parts[k], w_ids))
        check(first_hit(w_ids, seqs) is None, "n=2 choice %d holds a sequence of %r: %s" % (k, word, w_ids))

# ---- bad input ----
def status(extra, path="/v1/completions"):
    body = dict(model="m", prompt=PROMPT, max_tokens=4)
    body.update(extra)
    r = requests.post(url + path, json=body, timeout=60)
    return r.status_code, (r.json().get("error") or {}).get("param") if r.headers.get("content-type", "").startswith(
        "application/json") else None


for extra, param in [({"allowed_token_ids": []}, "allowed_token_ids"), ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
                     ({"allowed_token_ids": [3013]}, "allowed_token_ids"), ({"allowed_token_ids": ["1"]}, "allowed_token_ids"),
                     ({"allowed_token_ids": 5}, "allowed_token_ids"),
                     ({"bad_words": "the"}, "bad_words"), ({"bad_words": [1]}, "bad_words"),
                     ({"bad_words": ["  \t"]}, "bad_words"), ({"bad_words": ["w%d" % i for i in range(200)]}, "bad_words")]:
    got = status(extra)
    check(got == (400, param), "%s: %s, want (400, %s)" % (extra, got, param))
check(status({"allowed_token_ids": None, "bad_words": None})[0] == 200, "null fields are absent ones")
check(status({"bad_words": []})[0] == 200, "an empty bad_words list is no list")

print("token_limits_check: %d mismatches" % fails)
sys.exit(1 if fails else 0)
