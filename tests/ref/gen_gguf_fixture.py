#!/usr/bin/env python3
"""gen_gguf_fixture.py -- the GGUF unit-test fixture (tests/unit/data/gguf/), written and read back by
the `gguf` package (gguf-py, llama.cpp's own Python library) and transformers' GGUF loader.

Writes:
  tiny.gguf      a 2-layer llama (hidden 64, 4 heads / 2 KV heads, head_dim 16, ffn 64, vocab 64) whose
                 tensors use every type sits-dist dequantises -- F32, F16, BF16, Q8_0, Q4_0, Q4_1 --
                 including permuted attn_q / attn_k in several types, a tensor without an HF name
                 (rope_freqs.weight, skipped by the loader) and metadata of every GGUF value type.
  kquant.gguf    the same header, three of the tensors and blk.0.ffn_up.weight as IQ2_XXS (random bytes): a type
                 still refused by type and name (Q6_K until the K-quants were read).
  quants.gguf    one tensor of each type dequantised beyond tiny.gguf's -- Q5_0, Q5_1 (gguf.quantize) and the
  quants.json    K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (random super-blocks with sane f16 scales: gguf-py cannot
  quants.f32     quantise to them) -- and gguf.dequantize's values of each (the reference: llama.cpp's own Python).
  qwen2.gguf     [gguf qwen] one-layer qwen2 (q/k/v biases), qwen3 (q/k norms) and [gguf gemma] gemma3 (sandwich
  qwen3.gguf     norms stored as 1 + w, tied head) GGUFs, and <arch>.json / <arch>.f32: every tensor under the name and
  gemma3.gguf    with the values transformers' load_gguf_checkpoint gives it (no q/k permutation in these architectures;
  gemma2.gguf    Gemma2TensorProcessor's norm - 1); gemma2 as gemma3 without q/k norms.
  `--quants-only` rewrites kquant.gguf, the quants.* and qwen* files alone (tiny.gguf and expected.* untouched).
  expected.json  for each tensor of tiny.gguf: the GGUF name, the transformers name (None when skipped),
                 the ggml type, the HF shape and where its expected fp32 values are in expected.f32;
                 the metadata values; the data section offset.
  expected.f32   the expected values (little-endian fp32), from transformers'
                 load_gguf_checkpoint(return_tensors=True, model_to_load=LlamaForCausalLM(config)),
                 i.e. gguf.dequantize + LlamaTensorProcessor's reverse permutation + its name map.

Usage: python3 tests/ref/gen_gguf_fixture.py [OUT_DIR]   (needs numpy, gguf, torch, transformers)
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
OUT = ARGS[0] if ARGS else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "..", "unit", "data", "gguf")
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 64, 4, 2, 64, 64, 2
HEAD_DIM = HIDDEN // HEADS
rng = np.random.default_rng(19)


def llama_permute(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute: HF rows -> llama.cpp's interleaved rope rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# (GGUF name, HF-layout numpy shape, ggml type); q/k are written permuted, as convert_hf_to_gguf.py does
TENSORS = [("token_embd.weight", (VOCAB, HIDDEN), Q.Q8_0), ("output_norm.weight", (HIDDEN,), Q.F32),
           ("output.weight", (VOCAB, HIDDEN), Q.Q4_1), ("rope_freqs.weight", (HEAD_DIM // 2,), Q.F32)]
LAYER_TYPES = [
    dict(attn_q=Q.Q4_0, attn_k=Q.Q4_1, attn_v=Q.F16, attn_output=Q.BF16, ffn_gate=Q.Q8_0, ffn_up=Q.Q4_0,
         ffn_down=Q.Q4_1, attn_norm=Q.F32, ffn_norm=Q.F32),
    dict(attn_q=Q.F16, attn_k=Q.BF16, attn_v=Q.Q8_0, attn_output=Q.Q4_1, ffn_gate=Q.F32, ffn_up=Q.F16,
         ffn_down=Q.BF16, attn_norm=Q.F16, ffn_norm=Q.BF16),
]
SHAPES = dict(attn_q=(HIDDEN, HIDDEN), attn_k=(KV_HEADS * HEAD_DIM, HIDDEN), attn_v=(KV_HEADS * HEAD_DIM, HIDDEN),
              attn_output=(HIDDEN, HIDDEN), ffn_gate=(FFN, HIDDEN), ffn_up=(FFN, HIDDEN), ffn_down=(HIDDEN, FFN),
              attn_norm=(HIDDEN,), ffn_norm=(HIDDEN,))
for layer, types in enumerate(LAYER_TYPES):
    for part, t in types.items():
        TENSORS.append((f"blk.{layer}.{part}.weight", SHAPES[part], t))

# metadata of every value type (beyond what the llama loader needs)
META = {
    "test.u8": (200, gguf.GGUFValueType.UINT8), "test.i8": (-100, gguf.GGUFValueType.INT8),
    "test.u16": (60000, gguf.GGUFValueType.UINT16), "test.i16": (-30000, gguf.GGUFValueType.INT16),
    "test.u32": (4000000000, gguf.GGUFValueType.UINT32), "test.i32": (-2000000000, gguf.GGUFValueType.INT32),
    "test.f32": (0.1, gguf.GGUFValueType.FLOAT32), "test.bool": (True, gguf.GGUFValueType.BOOL),
    "test.str": ("h\u00e9llo \u4e16\u754c", gguf.GGUFValueType.STRING),
    "test.u64": (18000000000000000000, gguf.GGUFValueType.UINT64),
    "test.i64": (-9000000000000000000, gguf.GGUFValueType.INT64), "test.f64": (2.5e-300, gguf.GGUFValueType.FLOAT64),
}
ARRAYS = {"test.arr_i32": [1, -2, 3, 2147483647], "test.arr_str": ["a", "", "\u00fc\u00df", "<|im_end|>"],
          "test.arr_f32": [0.5, -1.25]}


def value(name, shape, t):
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    w = (0.2 * rng.standard_normal(shape)).astype(np.float32)
    if t == Q.F16:  # some f16 subnormals and the largest value
        w.flat[:3] = [3e-6, -6e-8, 65504.0]
    return w


def write(path, tensors, with_kquant=False):
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    for k, (v, vt) in META.items():
        w.add_key_value(k, v, vt)
    w.add_array("test.arr_i32", ARRAYS["test.arr_i32"])
    w.add_array("test.arr_str", ARRAYS["test.arr_str"])
    w.add_array("test.arr_f32", ARRAYS["test.arr_f32"])
    for name, arr, t in tensors:
        if t in (Q.F32, Q.F16):
            w.add_tensor(name, arr.astype(np.float32 if t == Q.F32 else np.float16))
        else:
            q = gguf.quantize(arr, t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
    if with_kquant:
        raw = rng.integers(0, 256, size=(2, 66), dtype=np.uint8)  # 2 rows of one 256-element IQ2_XXS block
        w.add_tensor("blk.0.ffn_up.weight", raw, raw_shape=raw.shape, raw_dtype=Q.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# [gguf k-quants] (name, ggml type, rows, cols): K-quants 2 super-blocks a row
QUANTS = [("q5_0.weight", Q.Q5_0, 3, 64), ("q5_1.weight", Q.Q5_1, 3, 64), ("q2_k.weight", Q.Q2_K, 3, 512),
          ("q3_k.weight", Q.Q3_K, 3, 512), ("q4_k.weight", Q.Q4_K, 3, 512), ("q5_k.weight", Q.Q5_K, 3, 512),
          ("q6_k.weight", Q.Q6_K, 3, 512)]
# where each K-quant super-block keeps its f16 factors (d, and dmin where it has one)
K_F16 = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def write_quants(out):
    """quants.gguf + quants.json + quants.f32 (see the docstring)"""
    w = gguf.GGUFWriter(os.path.join(out, "quants.gguf"), "llama")
    entries, blobs, off = [], [], 0
    for name, t, rows, cols in QUANTS:
        if t in K_F16:
            size = gguf.GGML_QUANT_SIZES[t][1]
            raw = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
            for pos in K_F16[t]:   # d, dmin: positive, 2^-10 .. 2^-4, so no inf / nan
                f = (2.0 ** rng.uniform(-10, -4, size=(rows, cols // 256))).astype(np.float16)
                raw[:, :, pos:pos + 2] = f.view(np.uint8).reshape(rows, cols // 256, 2)
            raw = raw.reshape(rows, cols // 256 * size)
        else:
            raw = gguf.quantize((0.3 * rng.standard_normal((rows, cols))).astype(np.float32), t)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
        vals = np.ascontiguousarray(gguf.dequantize(raw, t), dtype="<f4")
        assert vals.shape == (rows, cols) and np.isfinite(vals).all(), name
        entries.append(dict(name=name, type=t.name, rows=rows, cols=cols, offset=off, count=int(vals.size)))
        blobs.append(vals.tobytes())
        off += vals.size * 4
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(out, "quants.f32"), "wb") as f:
        f.write(b"".join(blobs))
    with open(os.path.join(out, "quants.json"), "w") as f:
        json.dump(dict(generator="tests/ref/gen_gguf_fixture.py (gguf.dequantize)", tensors=entries), f, indent=1)
        f.write("\n")


def write_qwen(out, arch):
    """[gguf qwen] <arch>.gguf (qwen2: q/k/v biases; qwen3: per-head q/k norms) and <arch>.json / <arch>.f32: every tensor
    under the name transformers' load_gguf_checkpoint gives it and its values there (qwen GGUFs keep q/k rows as HF has
    them: no permutation)."""
    import torch
    from transformers import (Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Gemma3TextConfig,
                              Gemma3ForCausalLM, Gemma2Config, Gemma2ForCausalLM)
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    path = os.path.join(out, arch + ".gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if arch in ("qwen3", "gemma3", "gemma2"):
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if arch.startswith("gemma"):
        w.add_sliding_window(8)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    types = dict(attn_q=Q.Q5_0, attn_k=Q.Q5_1, attn_v=Q.Q8_0, attn_output=Q.F16, ffn_gate=Q.Q4_0, ffn_up=Q.Q4_1,
                 ffn_down=Q.Q8_0)
    tensors = [("token_embd.weight", (VOCAB, HIDDEN), Q.F16), ("output_norm.weight", (HIDDEN,), Q.F32),
               ("blk.0.attn_norm.weight", (HIDDEN,), Q.F32), ("blk.0.ffn_norm.weight", (HIDDEN,), Q.F32)]
    if not arch.startswith("gemma"):   # Gemma ties its head to the embedding
        tensors.append(("output.weight", (VOCAB, HIDDEN), Q.Q8_0))
    tensors += [(f"blk.0.{k}.weight", SHAPES[k], t) for k, t in types.items()]
    if arch == "qwen2":
        tensors += [(f"blk.0.{k}.bias", (SHAPES[k][0],), Q.F32) for k in ("attn_q", "attn_k", "attn_v")]
    elif arch != "gemma2":
        tensors += [("blk.0.attn_q_norm.weight", (HEAD_DIM,), Q.F32), ("blk.0.attn_k_norm.weight", (HEAD_DIM,), Q.F32)]
    if arch.startswith("gemma"):   # [gguf gemma] the sandwich norms; llama.cpp stores Gemma's norms as 1 + w (near 1 here too)
        tensors += [("blk.0.post_attention_norm.weight", (HIDDEN,), Q.F32), ("blk.0.post_ffw_norm.weight", (HIDDEN,), Q.F32)]
    for name, shape, t in tensors:
        arr = value(name, shape, t) if not name.endswith(".bias") else (0.1 * rng.standard_normal(shape)).astype(np.float32)
        if t in (Q.F32, Q.F16):
            w.add_tensor(name, arr.astype(np.float32 if t == Q.F32 else np.float16))
        else:
            q = gguf.quantize(arr, t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parsed = load_gguf_checkpoint(path, return_tensors=False)
    cfg_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM),
                          "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM), "gemma2": (Gemma2Config, Gemma2ForCausalLM)}[arch]
    cfg = cfg_cls(**{k: v for k, v in parsed["config"].items() if k not in ("model_type", "_model_name_or_path")})
    with torch.device("meta"):
        model = model_cls(cfg)
    hf = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    entries, blobs, off = [], [], 0
    for name in sorted(hf):
        vals = np.ascontiguousarray(hf[name].to(torch.float32).numpy(), dtype="<f4")
        entries.append(dict(hf_name=name, shape=list(vals.shape), offset=off, count=int(vals.size)))
        blobs.append(vals.tobytes())
        off += vals.size * 4
    assert len(entries) == len(tensors), (sorted(hf), [t[0] for t in tensors])
    with open(os.path.join(out, arch + ".f32"), "wb") as f:
        f.write(b"".join(blobs))
    with open(os.path.join(out, arch + ".json"), "w") as f:
        json.dump(dict(generator="tests/ref/gen_gguf_fixture.py (transformers load_gguf_checkpoint)", arch=arch,
                       tensors=entries), f, indent=1)
        f.write("\n")


def main():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    os.makedirs(OUT, exist_ok=True)
    tensors, originals = [], {}
    for name, shape, t in TENSORS:
        arr = value(name, shape, t)
        originals[name] = arr
        if ".attn_q." in name:
            arr = llama_permute(arr, HEADS)
        elif ".attn_k." in name:
            arr = llama_permute(arr, KV_HEADS)
        tensors.append((name, arr, t))
    tiny = os.path.join(OUT, "tiny.gguf")
    if "--quants-only" not in sys.argv:
        write(tiny, tensors)
    write(os.path.join(OUT, "kquant.gguf"), tensors[:3], with_kquant=True)
    write_quants(OUT)
    write_qwen(OUT, "qwen2")
    write_qwen(OUT, "qwen3")
    write_qwen(OUT, "gemma3")
    write_qwen(OUT, "gemma2")
    if "--quants-only" in sys.argv:
        return

    # what transformers makes of it: config from the metadata, tensors dequantised, un-permuted, renamed
    parsed = load_gguf_checkpoint(tiny, return_tensors=False)
    cfg = LlamaConfig(**{k: v for k, v in parsed["config"].items()
                         if k not in ("model_type", "_model_name_or_path", "tie_word_embeddings")},
                      tie_word_embeddings=False)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size) == (HEADS, KV_HEADS, HIDDEN), cfg
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    hf = load_gguf_checkpoint(tiny, return_tensors=True, model_to_load=model)["tensors"]

    reader = gguf.GGUFReader(tiny)
    # the reader's own view of each tensor, dequantised by gguf-py (independent of the name map)
    by_gguf = {t.name: t for t in reader.tensors}
    # transformers' own GGUF -> HF name map for this model
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map, LlamaTensorProcessor
    name_map = get_gguf_hf_weights_map(model, LlamaTensorProcessor(config=parsed["config"]))
    entries, blobs, off = [], [], 0
    for name, _, t in TENSORS:
        hf_name = name_map.get(name)
        if hf_name is not None and hf_name in hf:
            vals = hf[hf_name].to(torch.float32).numpy()
        else:
            hf_name = None
            vals = gguf.dequantize(by_gguf[name].data, by_gguf[name].tensor_type)
        vals = np.ascontiguousarray(vals, dtype="<f4")
        # sanity: transformers gives back the HF-layout values we started from, up to quantisation error
        err = np.abs(vals.astype(np.float64) - originals[name]).max() / np.abs(originals[name]).max()
        assert err < 0.1, (name, err)
        entries.append(dict(gguf_name=name, hf_name=hf_name, type=t.name, hf_shape=list(vals.shape),
                            gguf_ne=[int(x) for x in by_gguf[name].shape], offset=off, count=int(vals.size),
                            data_offset=int(by_gguf[name].data_offset)))
        blobs.append(vals.tobytes())
        off += vals.size * 4
    with open(os.path.join(OUT, "expected.f32"), "wb") as f:
        f.write(b"".join(blobs))

    meta = {}
    for k, f in reader.fields.items():
        if not k.startswith("test."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = f.types[1] if len(f.types) > 1 else gguf.GGUFValueType.INT32
            vals = [f.parts[i].tobytes().decode() if et == gguf.GGUFValueType.STRING else f.parts[i].tolist()[0]
                    for i in f.data]
            meta[k] = dict(type=int(vt), elem_type=int(et), values=vals)
        else:
            v = f.parts[f.data[0]]
            v = v.tobytes().decode() if vt == gguf.GGUFValueType.STRING else v.tolist()[0]
            if vt == gguf.GGUFValueType.UINT64:
                v = "u64:%d" % v  # past int64: JSON readers (jansson) refuse it as a number
            meta[k] = dict(type=int(vt), elem_type=int(vt), values=[v])
    doc = dict(
        generator="tests/ref/gen_gguf_fixture.py (gguf %s, transformers %s)" % (
            getattr(gguf, "__version__", "?"), __import__("transformers").__version__),
        heads=HEADS, kv_heads=KV_HEADS, tensor_count=len(reader.tensors), kv_count=len(reader.fields) - 3,
        alignment=32, data_start=int(reader.data_offset), tensors=entries, metadata=meta)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", OUT, "with", len(entries), "tensors,", sum(e["hf_name"] is not None for e in entries), "with HF names")


if __name__ == "__main__":
    main()
