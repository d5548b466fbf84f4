#!/usr/bin/env python3
"""[gguf gemma] A Gemma 2 GGUF served on its own (tests/integration/gguf_gemma.sh) and what transformers makes of it.

Writes tests/unit/data/gguf/gemma2_model.gguf: a 2-layer gemma2 (hidden 64, 4 heads / 2 KV heads, head_dim 16, ffn 128,
sliding window 4 on layer 0, tied head) with random weights in the types llama.cpp uses (F16 embedding, Q8_0 / Q4_0 /
F16 linears, F32 norms stored as 1 + w as llama.cpp stores Gemma's), and tok_gemma.gguf's tokenizer
(gen_gguf_tokenizers.py: Gemma's sentencepiece vocabulary, merges by file order). Only the metadata llama.cpp's
converter writes: the config keys the file lacks (soft-capping, query_pre_attn_scalar...) take Gemma2Config's defaults,
in transformers as in sits-dist.

gemma2_model.json (the reference): transformers' AutoTokenizer / AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...) (fp32, eager attention): for each text its ids (special tokens added) and 12 greedy tokens (a full
forward a step, no cache), and the prompt's last-position top-5 logits.

Usage: python3 tests/ref/gen_gguf_gemma.py [--check]   (needs numpy, torch, transformers, gguf)
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as Q
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_gguf_tokenizers import gemma_tokens, gemma_tokenizer_keys  # noqa: E402

OUT = os.path.normpath(os.path.join(HERE, "..", "unit", "data", "gguf"))
NAME = "gemma2_model.gguf"
HIDDEN, HEADS, KV, HD, FFN, LAYERS = 64, 4, 2, 16, 128, 2
TEXTS = ["The quick brown fox jumps over the lazy dog", "Hello world, numbers 12345 and a longer tail of words here",
         "  two spaces first"]
NEW = 12


def write(path):
    rng = np.random.default_rng(23)
    tokens = gemma_tokens()
    V = len(tokens)
    w = gguf.GGUFWriter(path, "gemma2")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(4)
    gemma_tokenizer_keys(w, tokens)

    def add(name, arr, t):
        if t == Q.F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif t == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quantize(arr.astype(np.float32), t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)

    add("token_embd.weight", rng.standard_normal((V, HIDDEN)) * 0.1, Q.F16)
    add("output_norm.weight", 1.0 + 0.1 * rng.standard_normal(HIDDEN), Q.F32)
    lin = dict(attn_q=((HEADS * HD, HIDDEN), Q.Q8_0), attn_k=((KV * HD, HIDDEN), Q.Q4_0), attn_v=((KV * HD, HIDDEN), Q.F16),
               attn_output=((HIDDEN, HEADS * HD), Q.Q8_0), ffn_gate=((FFN, HIDDEN), Q.Q4_0), ffn_up=((FFN, HIDDEN), Q.Q8_0),
               ffn_down=((HIDDEN, FFN), Q.F16))
    for l in range(LAYERS):
        for k in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            add(f"blk.{l}.{k}.weight", 1.0 + 0.1 * rng.standard_normal(HIDDEN), Q.F32)
        for k, (shape, t) in lin.items():
            add(f"blk.{l}.{k}.weight", 3.0 * rng.standard_normal(shape) / np.sqrt(shape[1]), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference(path):
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager").eval()
    c = model.config
    out = {"config": {k: getattr(c, k) for k in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                                                  "sliding_window", "head_dim", "vocab_size", "hidden_activation")},
           "cases": []}
    for text in TEXTS:
        ids = tok(text, add_special_tokens=True).input_ids
        seq = list(ids)
        top = None
        with torch.no_grad():
            for step in range(NEW):
                logits = model(torch.tensor([seq])).logits[0, -1]
                if step == 0:
                    v, i = torch.topk(logits, 5)
                    top = {"ids": i.tolist(), "logits": [round(x, 5) for x in v.tolist()]}
                seq.append(int(torch.argmax(logits)))
        out["cases"].append({"text": text, "ids": ids, "greedy": seq[len(ids):], "top5": top})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    tmp = tempfile.mkdtemp(prefix="sits-gguf-gemma-")
    try:
        path = os.path.join(tmp, NAME)
        write(path)
        doc = {"generator": {"script": "tests/ref/gen_gguf_gemma.py", "transformers": transformers.__version__,
                             "torch": torch.__version__, "gguf": getattr(gguf, "__version__", "?")}}
        doc.update(reference(path))
        text = json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
        ref = os.path.join(OUT, NAME[:-5] + ".json")
        if args.check:
            same = open(ref, encoding="utf-8").read() == text and open(path, "rb").read() == open(os.path.join(OUT, NAME), "rb").read()
            print("matches" if same else "DIFFERS")
            return 0 if same else 1
        shutil.copy(path, os.path.join(OUT, NAME))
        open(ref, "w", encoding="utf-8").write(text)
        for c in doc["cases"]:
            print(len(c["ids"]), c["greedy"])
        print(doc["config"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
