"""spec_decode.py -- the workload of tests/integration/spec_decode.sh (speculative decoding, n-gram).

  spec_decode.py run URL OUT [--opt-out-odd]   run the workload against a server, write OUT (JSON)
  spec_decode.py compare REF GOT               every result of GOT equals REF's (token ids, logprobs,
                                               text, usage, finish reasons); prints the first mismatches
  spec_decode.py metric URL NAME               prints the value of a /metrics sample (0 when absent)
  spec_decode.py ties REF GOT [TOL]            GPU form of compare: how many greedy requests of GOT have REF's token
                                               ids; where one departs, the two tokens chosen there must have been a
                                               near tie (their logprobs within TOL nats, default 0.05: batch-shape
                                               noise of bf16 sums), and nothing past that point is compared

The reference is the same server without --speculative-config (non-speculative greedy / seeded
sampling): speculative decoding must not change a single token id or logprob on the CPU backend."""
import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TEXT = ("The sort() method sorts the list in place, using only < comparisons between items. "
        "Exceptions are not suppressed - if any comparison operations fail, the entire sort operation will fail.")
PROMPTS = [
    "Repeat this text exactly: " + TEXT + "\nRepeated: " + TEXT[:40],
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n",
    "The list type is mutable. The list type is mutable. The list type",
    "A dictionary maps keys to values. " * 3,
    "Edit the code: rename x to y.\nx = 1\nprint(x + x)\nx = x * 2\nAnswer:\ny = 1\nprint(",
    "Summarise: " + TEXT + "\nSummary: The sort() method",
]
# the demo model continues this loop (copying its prompt): long accepted runs
LOOP = "    3.11\n\n       Added support for the *bases* parameter.\n\n" * 3
# ... and this one with an eos (<|eot_id|>) after a few tokens
EOS = "If the key is a string, the key is a string.  If the key is a string, the key is a string.  If the key"


def post(url, path, body, stream=False):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = urllib.request.urlopen(req, timeout=300)
    if not stream:
        return json.load(r)
    text, usage, finish, chunks = "", None, None, 0
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            text += ch.get("text") or ""
            finish = ch.get("finish_reason") or finish
            chunks += 1
    return {"text": text, "usage": usage, "finish": finish}


TEXT_ONLY = "--text-only" in sys.argv   # pipeline parallelism has no logprobs (yet): compare texts


def complete(url, prompt_ids, **kw):
    body = {"prompt": prompt_ids, "temperature": 0}
    if not TEXT_ONLY:
        body.update({"logprobs": 0, "return_tokens_as_token_ids": True})
    body.update(kw)
    j = post(url, "/v1/completions", body)
    c = j["choices"][0]
    lp = c.get("logprobs") or {}
    ids = [int(t.split(":")[1]) for t in lp.get("tokens", [])]
    return {"ids": ids, "logprobs": lp.get("token_logprobs", []), "text": c["text"], "finish": c["finish_reason"],
            "usage": [j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"],
                      (j["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)]}


def run(url, out, opt_out_odd):
    toks = [post(url, "/tokenize", {"prompt": p})["tokens"] for p in PROMPTS]
    res = {}
    # 1. copy prompts, greedy, 4 at a time (continuous batching; odd ones opt out on request)
    def copy(i):
        extra = {"speculative": False} if opt_out_odd and i % 2 else {}
        return complete(url, toks[i], max_tokens=40, ignore_eos=True, **extra)
    with ThreadPoolExecutor(4) as ex:
        res["copy"] = list(ex.map(copy, range(len(PROMPTS))))
    # 2. prompts that extend earlier outputs: their blocks (generated under speculation) come from the prefix cache
    def extend(i):
        if TEXT_ONLY:
            return complete(url, post(url, "/tokenize", {"prompt": PROMPTS[i] + res["copy"][i]["text"][:120]})["tokens"],
                            max_tokens=16, ignore_eos=True)
        return complete(url, toks[i] + res["copy"][i]["ids"][:33], max_tokens=16, ignore_eos=True)
    with ThreadPoolExecutor(3) as ex:
        res["extend"] = list(ex.map(extend, range(len(PROMPTS))))
    # 3. seeded sampling: the same tokens as without speculation (the sampler's counters are per token)
    res["sampled"] = [complete(url, toks[i], max_tokens=32, temperature=0.8, seed=7 + i, ignore_eos=True) for i in (0, 1)]
    loop, eos = (post(url, "/tokenize", {"prompt": p})["tokens"] for p in (LOOP, EOS))
    res["loop"] = complete(url, loop, max_tokens=48, ignore_eos=True)
    # 4. max_tokens where a run of drafts would go on (drafts are cut to what max_tokens leaves)
    res["max_tokens"] = [complete(url, loop, max_tokens=m, ignore_eos=True) for m in (1, 2, 5, 9, 14)]
    # 5. stop ids of the copied loop (several: some land inside an accepted run, which the log shows), eos
    stop_ids = res["loop"]["ids"][6:16:3] if not TEXT_ONLY else [post(url, "/tokenize", {"prompt": w})["tokens"][-1]
                                                                  for w in (" support", " the", " *", "bases")]
    res["stop_id"] = [complete(url, loop, max_tokens=40, stop_token_ids=[t]) for t in stop_ids]
    res["eos"] = complete(url, eos, max_tokens=40)
    # 6. stop strings of the copied loop
    res["stop_str"] = [complete(url, loop, max_tokens=40, stop=[s]) for s in ("parameter.", "bases", "3.11\n  ")]
    # 7. streaming (several tokens per step arrive together)
    res["stream"] = [post(url, "/v1/completions", {"prompt": p, "max_tokens": 40, "temperature": 0, "stream": True,
                                                   "stream_options": {"include_usage": True}, "stop": ["parameter."]},
                          stream=True) for p in (loop, toks[5])]
    json.dump(res, open(out, "w"), indent=1)


def first_diff(a, b, path, out):
    if type(a) != type(b):
        out.append("%s: %r vs %r" % (path, a, b))
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            first_diff(a.get(k), b.get(k), path + "." + k, out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append("%s: length %d vs %d" % (path, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            first_diff(x, y, "%s[%d]" % (path, i), out)
    elif a != b:
        out.append("%s: %r vs %r" % (path, a, b))


def compare(ref, got):
    a, b = json.load(open(ref)), json.load(open(got))
    diffs = []
    first_diff(a, b, "", diffs)
    for d in diffs[:10]:
        print("mismatch (reference vs speculative) " + d)
    n = sum(len(r["ids"]) or r["usage"][1] for r in b["copy"])
    print("%d mismatches; %d greedy copy tokens compared" % (len(diffs), n))
    return 1 if diffs else 0


def ties(ref, got, tol):
    """Greedy requests of GOT against REF: identical token ids, or a first departure at a near tie."""
    a, b = json.load(open(ref)), json.load(open(got))
    reqs = []
    for k in ("copy", "extend", "max_tokens", "stop_id", "stop_str"):
        reqs += [("%s[%d]" % (k, i), x, y) for i, (x, y) in enumerate(zip(a[k], b[k]))]
    reqs += [(k, a[k], b[k]) for k in ("loop", "eos")]
    same, tied, bad = 0, [], []
    for name, x, y in reqs:
        i = next((j for j, (p, q) in enumerate(zip(x["ids"], y["ids"])) if p != q), None)
        if i is None:
            # one may stop earlier only by a stop rule reached on the same tokens
            if x["ids"][:len(y["ids"])] == y["ids"][:len(x["ids"])] and x["finish"] == y["finish"] and len(x["ids"]) == len(y["ids"]):
                same += 1
            else:
                bad.append("%s: same prefix, lengths %d / %d, finish %s / %s" % (name, len(x["ids"]), len(y["ids"]), x["finish"],
                                                                                y["finish"]))
            continue
        gap = abs(x["logprobs"][i] - y["logprobs"][i])
        (tied if gap <= tol else bad).append("%s: token %d: %d (logprob %.4f) vs %d (%.4f)" % (
            name, i, x["ids"][i], x["logprobs"][i], y["ids"][i], y["logprobs"][i]))
    for t in tied:
        print("near tie (reference vs speculative) " + t)
    for t in bad:
        print("departure without a tie (reference vs speculative) " + t)
    print("%d of %d greedy requests identical, %d departed at a near tie (<= %.3f nats), %d otherwise" % (
        same, len(reqs), len(tied), tol, len(bad)))
    return 1 if bad else 0


def metric(url, name):
    for line in urllib.request.urlopen(url + "/metrics", timeout=60).read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            print(line.split()[-1])
            return 0
    print(0)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], "--opt-out-odd" in sys.argv)
    elif sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    elif sys.argv[1] == "ties":
        sys.exit(ties(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.05))
    elif sys.argv[1] == "metric":
        sys.exit(metric(sys.argv[2], sys.argv[3]))
