#!/usr/bin/env python3
"""[gguf gemma] [gguf phi3] [gguf moe] GGUFs served on their own (tests/integration/gguf_models.sh) and what transformers makes of them.

Writes into tests/unit/data/gguf/, for each model, NAME.gguf and NAME.json (the reference):
  gemma2_model  a 2-layer gemma2 (hidden 64, 4 heads / 2 KV heads, head_dim 16, ffn 128, sliding window 4 on layer 0,
                tied head), norms stored as 1 + w as llama.cpp stores Gemma's, and tok_gemma.gguf's tokenizer
                (gen_gguf_tokenizers.py: Gemma's sentencepiece vocabulary, merges by file order);
  phi3_model    a 2-layer phi3 (hidden 64, 4 heads / 4 KV heads, ffn 128, its own head) with the fused attn_qkv and
                ffn_up (gate and up) llama.cpp writes, and a Llama sentencepiece vocabulary (the spm fixture's, scores
                -id, no merges) plus Phi-3's chat tokens, add_bos_token false;
  gemma3_model  a 6-layer gemma3 (five sliding-window layers, then a global one: the two RoPE bases), q / k norms,
                otherwise as gemma2_model;
  qwen3moe_model  a 2-layer qwen3moe (hidden 64, 4 / 2 heads, head_dim 16, q / k norms, 4 experts of ffn 768 -- the
                Qwen3MoeConfig default transformers keeps for GGUFs --, top 2) with the router ffn_gate_inp and the 3D
                expert tensors ffn_{gate,up,down}_exps llama.cpp writes, and tok_bpe.gguf's byte-level vocabulary with
                tokenizer.ggml.pre "qwen2".
Random weights in the types llama.cpp uses (F16 embeddings, Q8_0 / Q4_0 / F16 linears, F32 norms) and only the
metadata llama.cpp's converters write: the config keys a file lacks (Gemma's soft-capping and query_pre_attn_scalar...)
take the config class's defaults, in transformers as in sits-dist.

The reference: transformers' AutoTokenizer / AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) (fp32, eager
attention): for each text its ids (special tokens added) and 12 greedy tokens (a full forward a step, no cache), and
the prompt's last-position top-5 logits.

Usage: python3 tests/ref/gen_gguf_models.py [--check]   (needs numpy, torch, transformers, gguf)
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
from gen_gguf_tokenizers import (TEMPLATE, bpe_tokenizer_keys, bpe_vocab, gemma_tokens, gemma_tokenizer_keys,  # noqa: E402
                                 spm_token_keys, spm_vocab)

OUT = os.path.normpath(os.path.join(HERE, "..", "unit", "data", "gguf"))
HIDDEN, HD, FFN, LAYERS = 64, 16, 128, 2
TEXTS = ["The quick brown fox jumps over the lazy dog", "Hello world, numbers 12345 and a longer tail of words here",
         "  two spaces first"]
PHI3_TEXTS = ["<|user|>\nHow are you?<|end|>\n<|assistant|>\n"]
PHI3_CHAT = ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"]
NEW = 12
EXPERTS, TOP_K, EXPERT_FFN = 4, 2, 768   # qwen3moe: 768 is Qwen3MoeConfig's default, which transformers keeps for GGUFs


def phi3_tokenizer_keys(w):
    """The spm fixture's vocabulary as llama.cpp writes a sentencepiece file (scores -id, no merges), Phi-3's chat
    tokens after it (CONTROL), <|endoftext|> the EOS and pad, add_bos_token false; returns the vocabulary's size."""
    vocab, tokens, types = spm_vocab(PHI3_CHAT)
    spm_token_keys(w, tokens, types)
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))   # Phi3Config's default pad id (32000) is past this vocabulary
    w.add_unk_token_id(vocab["<unk>"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(TEMPLATE)
    return len(tokens)


def write(path, arch):
    rng = np.random.default_rng({"gemma2": 23, "phi3": 29, "qwen3moe": 31, "gemma3": 37}[arch])
    gemma, moe, gemma3 = arch.startswith("gemma"), arch == "qwen3moe", arch == "gemma3"
    heads, kv = (4, 2) if gemma or moe else (4, 4)
    layers = 6 if gemma3 else LAYERS   # Gemma 3: five sliding layers, then a global one
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    if gemma or moe:
        w.add_key_length(HD)
        w.add_value_length(HD)
    else:
        w.add_rope_dimension_count(HD)
    if moe:
        w.add_expert_count(EXPERTS)
        w.add_expert_used_count(TOP_K)
        w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_rope_freq_base(1000000.0 if gemma3 else 10000.0)
    w.add_layer_norm_rms_eps(1e-6 if gemma else 1e-5)
    if gemma:
        w.add_sliding_window(4)
        tokens = gemma_tokens()
        gemma_tokenizer_keys(w, tokens)
        V = len(tokens)
    elif moe:
        vocab = bpe_vocab()
        bpe_tokenizer_keys(w, "qwen2", vocab)
        V = len(vocab[0])
    else:
        V = phi3_tokenizer_keys(w)

    def add(name, arr, t):
        if t == Q.F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif t == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quantize(arr.astype(np.float32), t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)

    add("token_embd.weight", rng.standard_normal((V, HIDDEN)) * (0.1 if gemma else 1.0), Q.F16)
    add("output_norm.weight", 1.0 + 0.1 * rng.standard_normal(HIDDEN), Q.F32)
    if not gemma:
        add("output.weight", rng.standard_normal((V, HIDDEN)) / np.sqrt(HIDDEN), Q.Q8_0)
    if gemma:
        lin = dict(attn_q=((heads * HD, HIDDEN), Q.Q8_0), attn_k=((kv * HD, HIDDEN), Q.Q4_0), attn_v=((kv * HD, HIDDEN), Q.F16),
                   attn_output=((HIDDEN, heads * HD), Q.Q8_0), ffn_gate=((FFN, HIDDEN), Q.Q4_0), ffn_up=((FFN, HIDDEN), Q.Q8_0),
                   ffn_down=((HIDDEN, FFN), Q.F16))
        norms = ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
    elif moe:   # [gguf moe] q / k norms; the router and the experts' 3D tensors [experts, rows, cols]
        lin = dict(attn_q=((heads * HD, HIDDEN), Q.Q8_0), attn_k=((kv * HD, HIDDEN), Q.Q4_0), attn_v=((kv * HD, HIDDEN), Q.F16),
                   attn_output=((HIDDEN, heads * HD), Q.Q8_0), ffn_gate_inp=((EXPERTS, HIDDEN), Q.F32),
                   ffn_gate_exps=((EXPERTS, EXPERT_FFN, HIDDEN), Q.Q8_0), ffn_up_exps=((EXPERTS, EXPERT_FFN, HIDDEN), Q.Q4_0),
                   ffn_down_exps=((EXPERTS, HIDDEN, EXPERT_FFN), Q.Q8_0))
        norms = ("attn_norm", "ffn_norm")
    else:   # [gguf phi3] q, k, v rows in one tensor; gate rows, then up rows in ffn_up
        lin = dict(attn_qkv=(((heads + 2 * kv) * HD, HIDDEN), Q.Q8_0), attn_output=((HIDDEN, heads * HD), Q.Q4_0),
                   ffn_up=((2 * FFN, HIDDEN), Q.Q8_0), ffn_down=((HIDDEN, FFN), Q.F16))
        norms = ("attn_norm", "ffn_norm")
    for l in range(layers):
        for k in norms:
            add(f"blk.{l}.{k}.weight", 1.0 + 0.1 * rng.standard_normal(HIDDEN), Q.F32)
        if moe or gemma3:
            for k in ("attn_q_norm", "attn_k_norm"):
                add(f"blk.{l}.{k}.weight", 1.0 + 0.1 * rng.standard_normal(HD), Q.F32)
        for k, (shape, t) in lin.items():
            add(f"blk.{l}.{k}.weight", 3.0 * rng.standard_normal(shape) / np.sqrt(shape[-1]), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference(path, texts, keys):
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager").eval()
    c = model.config
    out = {"config": {k: getattr(c, k, None) for k in keys}, "cases": []}
    for text in texts:
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


MODELS = [("gemma2_model", "gemma2", TEXTS, ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                                             "sliding_window", "head_dim", "vocab_size", "hidden_activation")),
          ("phi3_model", "phi3", TEXTS + PHI3_TEXTS, ("sliding_window", "head_dim", "vocab_size", "hidden_act",
                                                     "tie_word_embeddings", "rope_parameters")),
          ("qwen3moe_model", "qwen3moe", TEXTS, ("head_dim", "vocab_size", "num_experts", "num_experts_per_tok",
                                                 "moe_intermediate_size", "norm_topk_prob", "tie_word_embeddings")),
          ("gemma3_model", "gemma3", TEXTS, ("query_pre_attn_scalar", "sliding_window", "head_dim", "vocab_size",
                                             "layer_types", "rope_parameters", "final_logit_softcapping"))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    tmp = tempfile.mkdtemp(prefix="sits-gguf-models-")
    differ = 0
    try:
        for name, arch, texts, keys in MODELS:
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            path = os.path.join(sub, name + ".gguf")
            write(path, arch)
            doc = {"generator": {"script": "tests/ref/gen_gguf_models.py", "transformers": transformers.__version__,
                                 "torch": torch.__version__, "gguf": getattr(gguf, "__version__", "?")}}
            doc.update(reference(path, texts, keys))
            text = json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True, default=str) + "\n"
            ref = os.path.join(OUT, name + ".json")
            if args.check:
                same = open(ref, encoding="utf-8").read() == text and \
                    open(path, "rb").read() == open(os.path.join(OUT, name + ".gguf"), "rb").read()
                print(name, "matches" if same else "DIFFERS")
                differ += not same
                continue
            shutil.copy(path, os.path.join(OUT, name + ".gguf"))
            open(ref, "w", encoding="utf-8").write(text)
            for c in doc["cases"]:
                print(name, len(c["ids"]), c["greedy"])
            print(name, doc["config"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
