#!/usr/bin/env python3
"""[int4] Convert a committed fixture model into INT4 weight-only checkpoints as published on the HF hub.

Purpose: write tests/fixtures/models/<src>_<fmt>/ (default src: qwen3_tied, the smallest fixture with
  tied embeddings: the repository is near its size limit) for three formats, every linear of the blocks
  (q/k/v/o/gate/up/down) quantised to 4 bits, groups of GROUP inputs, round to nearest (the packing is
  what is tested, not the quantiser; --case --calib uses the formats' real quantisers, AWQ and GPTQ, see
  "calibrated quantisers" below); embeddings and norms kept in the source dtype:
    awq   AutoAWQ GEMM: qweight int32 [in, out/8] packed along the OUTPUT dim in AWQ's order
          [0, 2, 4, 6, 1, 3, 5, 7], qzeros int32 [in/g, out/8] packed the same way, scales fp16 [in/g, out],
          asymmetric (zero_point true). Packing as AutoAWQ's WQLinear_GEMM.from_linear
          (awq/modules/linear/gemm.py); unpacking as AutoAWQ's awq/utils/packing_utils.py
          (unpack_awq, reverse_awq_order, dequantize_gemm), which transformers' AWQ loader uses.
    gptq  AutoGPTQ / GPTQModel checkpoint_format "gptq" (v1), desc_act true (act-order: a g_idx that
          permutes the groups; one permutation per layer input, shared by q/k/v and by gate/up as the
          Hessian ordering is), asymmetric: qweight int32 [in/8, out] packed along the INPUT dim,
          qzeros int32 [n_groups, out/8] holding zero - 1 (v1's offset), scales fp16 [n_groups, out],
          g_idx int32 [in]. Packing as AutoGPTQ's QuantLinear.pack (auto_gptq/nn_modules/qlinear/
          qlinear_cuda_old.py; GPTQModel's gptqmodel/nn_modules/qlinear/__init__.py pack is the same);
          unpacking as its dequantisation (zeros + 1 for v1, scales[g_idx]).
    ct    compressed-tensors "pack-quantized" W4A16, strategy group, symmetric: quantised, packed and
          decompressed with the compressed-tensors package itself (calculate_qparams, quantize,
          PackedQuantizationCompressor.compress / .decompress): weight_packed int32 [out, in/8],
          weight_scale bf16 [out, in/g], weight_shape int64 [2].
  model.safetensors and reference.json are committed xz-compressed (.xz; the tests unpack them).
  reference.json (format of gen_fixtures.py; all_logits of the 5-token prompt to stay small) holds
  the logits and greedy tokens of the DEQUANTISED model, decoded from the packed tensors by the format's
  own unpacking (above), w = (q - z) * s in float32, run by HF transformers in float32 from a plain
  fp32 checkpoint of those values -- so a loader that unpacks correctly must reproduce it like the
  other fixtures (fp32 CPU within 1e-4).

Unit data (--units): tests/unit/data/int4/<variant>.{safetensors,json}, one 16 x 64 linear per variant
  the fixtures do not cover (GPTQ gptq_v2 sym / asym, GPTQ per-channel, compressed-tensors asymmetric
  with its packed weight_zero_point, channel strategy sym / asym) with its dequantised weights
  (".deq", float32, the format's unpacking as above / the compressed-tensors package) and its
  quantization_config; tests/unit/test_int4.c checks our unpacking against them bit for bit.

Modes (nothing is written unless asked):
  python3 tests/ref/gen_int4_fixtures.py --write [fmt ...]   (or SITS_REGEN=1 ...)
  python3 tests/ref/gen_int4_fixtures.py --write --units     the unit data
  python3 tests/ref/gen_int4_fixtures.py --case SRC FMT GROUP DIR   a model in format FMT, no reference
      [--calib TEXT [--calib-samples 128] [--calib-len 512]]    ... quantised by the format's published
                                                                quantiser (AWQ / GPTQ) calibrated on TEXT
  python3 tests/ref/gen_int4_fixtures.py --ids MODEL TEXT N LEN OUT   N x LEN token ids of TEXT (an eval set)
  python3 tests/ref/gen_int4_fixtures.py --check [fmt ...]   regenerate into a temp dir and compare
Deterministic: the source fixture is committed; the act-order permutations come from a seeded generator.
Needs: torch, transformers, safetensors (tests/ref/requirements.txt) and compressed-tensors (0.20.1).
"""

import argparse
import json
import lzma
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as gf  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GROUP = 32          # the fixtures' inputs are 64 / 128: group 128 would be one group per row
BITS = 4            # 8: the 8-bit variants of GPTQ and compressed-tensors (W8A16; --case gptq8 / ct8, the *8_* units)
PERM_SEED = 2500
ALL_LOGITS_PROMPT = 1
FORMATS = ("awq", "gptq", "ct")
XZ_FILES = ("model.safetensors", "reference.json")   # committed as .xz (the tests unpack them)


def xz_dir(d, unpack):
    """compress XZ_FILES of d in place (xz -9e), or unpack them (unpack=True)"""
    for f in XZ_FILES:
        src, dst = (os.path.join(d, f + ".xz"), os.path.join(d, f)) if unpack else (os.path.join(d, f), os.path.join(d, f + ".xz"))
        if not os.path.exists(src):
            continue
        with open(src, "rb") as fi:
            data = fi.read()
        data = lzma.decompress(data) if unpack else lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
        with open(dst, "wb") as fo:
            fo.write(data)
        os.remove(src)


def is_linear(name):
    return name.startswith("model.layers.") and name.endswith(".weight") and \
        any("." + l + "." in name for l in LINEARS)


def rtn_asym(w, gidx, n_groups):
    """w [out, in] fp32, gidx [in] -> (q int [out, in] 0..15, zero int [out, ng], scale fp16 [out, ng]):
    min/max per group (0 included), scale = (max - min) / 15, zero = round(-min / scale) (AutoAWQ's
    pseudo_quantize_tensor with zero_point; GPTQ's Quantizer.find_params for sym=False)."""
    out = w.shape[0]
    mx = torch.zeros(out, n_groups)
    mn = torch.zeros(out, n_groups)
    for g in range(n_groups):
        cols = (gidx == g).nonzero().flatten()
        mx[:, g] = torch.clamp(w[:, cols].amax(dim=1), min=0)
        mn[:, g] = torch.clamp(w[:, cols].amin(dim=1), max=0)
    top = (1 << BITS) - 1
    scale = ((mx - mn) / top).clamp(min=1e-5).half()
    s = scale.float()
    zero = torch.clamp(torch.round(-mn / s), 0, top).to(torch.int32)
    q = torch.clamp(torch.round(w / s[:, gidx]) + zero[:, gidx], 0, top).to(torch.int32)
    return q, zero, scale


def i32(x):
    """int64 tensor of 32-bit patterns -> int32 (two's complement)"""
    x = x & 0xFFFFFFFF
    return torch.where(x >= 2**31, x - 2**32, x).to(torch.int32)


# ---- AWQ (AutoAWQ WQLinear_GEMM) ----
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def awq_pack_cols(intweight):
    """[rows, cols] ints 0..15 -> int32 [rows, cols/8]: WQLinear_GEMM.from_linear's loop
    `for i in range(pack_num): qweight[:, col] |= intweight[:, col * pack_num + order_map[i]] << (i * w_bit)`"""
    rows, cols = intweight.shape
    packed = torch.zeros(rows, cols // 8, dtype=torch.int64)
    for col in range(cols // 8):
        for i in range(8):
            packed[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]].to(torch.int64) << (i * 4)
    return i32(packed)


def awq_unpack_cols(packed):
    """packing_utils.unpack_awq + reverse_awq_order: int32 [rows, cols/8] -> ints [rows, cols]"""
    shifts = torch.arange(0, 32, 4)
    iw = torch.bitwise_right_shift(packed[:, :, None], shifts[None, None, :]).to(torch.int8)
    iw = iw.view(iw.shape[0], -1)
    rev = torch.arange(iw.shape[-1], dtype=torch.int32).view(-1, 8)[:, AWQ_REVERSE_ORDER].view(-1)
    iw = iw[:, rev]
    return torch.bitwise_and(iw, 15).to(torch.int32)


def awq_convert(w, tensors, prefix, qz=None):
    """qz: (q, zero, scale) of a calibrated quantiser (--method), else round to nearest"""
    out, inp = w.shape
    gidx = torch.arange(inp) // GROUP
    q, zero, scale = qz if qz is not None else rtn_asym(w, gidx, inp // GROUP)
    tensors[prefix + ".qweight"] = awq_pack_cols(q.t().contiguous())          # [in, out/8]
    tensors[prefix + ".qzeros"] = awq_pack_cols(zero.t().contiguous())        # [in/g, out/8]
    tensors[prefix + ".scales"] = scale.t().contiguous()                      # [in/g, out] fp16
    # dequantize_gemm: (iweight - izeros.repeat_interleave(g)) * scales.repeat_interleave(g), [in, out]
    iw = awq_unpack_cols(tensors[prefix + ".qweight"])
    iz = awq_unpack_cols(tensors[prefix + ".qzeros"]).repeat_interleave(GROUP, dim=0)
    sc = tensors[prefix + ".scales"].float().repeat_interleave(GROUP, dim=0)
    return ((iw - iz).float() * sc).t().contiguous()


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm",
              "modules_to_not_convert": None}


# ---- GPTQ (AutoGPTQ QuantLinear.pack, checkpoint_format "gptq" v1) ----

def rtn_sym(w, gidx, n_groups):
    """symmetric RTN as GPTQ's Quantizer with sym=True: zero = 8, scale = max|w| / 7.5 (8-bit: 128, / 127.5)"""
    out = w.shape[0]
    amax = torch.zeros(out, n_groups)
    for g in range(n_groups):
        cols = (gidx == g).nonzero().flatten()
        amax[:, g] = w[:, cols].abs().amax(dim=1)
    mid = 1 << (BITS - 1)
    scale = (amax / (mid - 0.5)).clamp(min=1e-5).half()
    zero = torch.full((out, n_groups), mid, dtype=torch.int32)
    q = torch.clamp(torch.round(w / scale.float()[:, gidx]) + mid, 0, 2 * mid - 1).to(torch.int32)
    return q, zero, scale


def gptq_convert(w, tensors, prefix, perm, group=None, sym=False, v2=False, qz=None):
    """qz: (q, zero, scale) of a calibrated quantiser (--method; perm its act-order), else round to nearest"""
    out, inp = w.shape
    group = GROUP if group is None else inp if group == -1 else group
    ng = inp // group
    # act-order: columns taken in `perm` order, g_idx[perm[i]] = i // group (GPTQ.fasterquant with
    # actorder: g_idx = [perm_inv[i] // groupsize for i in range(columns)]); perm None: no act-order
    inv = torch.argsort(perm) if perm is not None else torch.arange(inp)
    gidx = (inv // group).to(torch.int32)
    q, zero, scale = qz if qz is not None else (rtn_sym if sym else rtn_asym)(w, gidx.long(), ng)
    per, mask = 32 // BITS, (1 << BITS) - 1                             # values per int32 (8, or 4 at 8 bits)
    intweight = q.t().contiguous().to(torch.int64)                      # [in, out]
    qweight = torch.zeros(inp // per, out, dtype=torch.int64)
    for row in range(inp // per):                                       # pack: `per` input rows per int32 row
        for j in range(per):
            qweight[row] |= intweight[row * per + j] << (BITS * j)
    zeros = zero.t().contiguous().to(torch.int64) - (0 if v2 else 1)    # [ng, out]: v1 stores zero - 1
    zeros = zeros & mask                                                # (AutoGPTQ packs the raw bits: 0 - 1 -> 15)
    qzeros = torch.zeros(ng, out // per, dtype=torch.int64)
    for col in range(out // per):
        for j in range(per):
            qzeros[:, col] |= zeros[:, col * per + j] << (BITS * j)
    tensors[prefix + ".qweight"] = i32(qweight)
    tensors[prefix + ".qzeros"] = i32(qzeros)
    tensors[prefix + ".scales"] = scale.t().contiguous()                # [ng, out] fp16
    tensors[prefix + ".g_idx"] = gidx
    # dequantisation of the v1 kernels (qlinear_cuda_old forward / exllama): zeros = stored + 1 (no wrap:
    # a stored 15 decodes to 16), weight = scales[g_idx] * (q - zeros[g_idx]); gptq_v2 (GPTQModel, whose
    # convert_gptq_v1_to_v2_format adds the 1 to qzeros once): zeros = stored
    shifts = torch.arange(0, 32, BITS)
    zs = (tensors[prefix + ".qzeros"][:, :, None] >> shifts[None, None, :]) & mask
    zs = zs.reshape(ng, out) + (0 if v2 else 1)
    ws = (tensors[prefix + ".qweight"][:, None, :] >> shifts[None, :, None]) & mask
    ws = ws.reshape(inp, out)
    g = tensors[prefix + ".g_idx"].long()
    deq = tensors[prefix + ".scales"].float()[g] * (ws - zs[g]).float()  # [in, out]
    return deq.t().contiguous()


GPTQ_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": True, "sym": False,
               "checkpoint_format": "gptq", "static_groups": False, "true_sequential": True, "damp_percent": 0.01,
               "lm_head": False}


# ---- compressed-tensors pack-quantized (the library itself) ----

def ct_scheme(sym=True, group=None):
    group = GROUP if group is None else group
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    kw = dict(strategy="group", group_size=group) if group != -1 else dict(strategy="channel")
    return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=BITS, type="int", symmetric=sym, dynamic=False, **kw))


def ct_convert(w, tensors, prefix, sym=True, group=None, qz=None):
    """qz: (q, zero, scale) of a calibrated symmetric quantiser (--method; q 0..15, zero 8, scale bf16),
    else the library's min/max parameters; either way the library packs"""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization.utils import calculate_qparams
    group = GROUP if group is None else group
    scheme = ct_scheme(sym, group)
    out, inp = w.shape
    g = inp if group == -1 else group
    if qz is None:
        wg = w.reshape(out, inp // g, g)
        scale, zp = calculate_qparams(wg.amin(dim=2), wg.amax(dim=2), scheme.weights)   # [out, ng]
        scale = scale.to(torch.bfloat16)   # checkpoints store the scale in the model's dtype
        w = w.to(torch.bfloat16)
    else:
        # the library re-quantises w with the scale: hand it the calibrated grid points (q - 8) * scale
        q, zero, scale = qz
        assert sym and bool((zero == 8).all())
        scale = scale.to(torch.bfloat16)
        w = (q - 8).float() * scale.float().repeat_interleave(g, dim=1)
        zp = torch.zeros_like(scale, dtype=torch.int8)
    comp = PackedQuantizationCompressor.compress({"weight": w, "weight_scale": scale,
                                                  "weight_zero_point": zp.to(torch.int8)}, scheme)
    for k, v in comp.items():
        tensors[prefix + "." + k] = v.contiguous()
    # the library's decompression, with the scale widened to fp32 so the product is one fp32 rounding
    dec = PackedQuantizationCompressor.decompress({k: (v.float() if k == "weight_scale" else v) for k, v in comp.items()},
                                                  scheme)
    if qz is not None:
        assert torch.equal(dec["weight"].float(), w), "%s: the library's packing changed calibrated values" % prefix
    return dec["weight"].float().contiguous()


def ct_config():
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                          "weights": {"num_bits": BITS, "type": "int", "symmetric": True, "strategy": "group",
                                                      "group_size": GROUP, "dynamic": False, "actorder": None,
                                                      "observer": "minmax"}}},
            "ignore": ["lm_head"]}


# ---- unit data: one linear per format variant the fixtures do not cover ----
UNIT_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "data", "int4"))
UNIT_BASE = "model.layers.0.mlp.down_proj"
UNIT_SHAPE = (16, 64)   # [out, in]


def unit_variants():
    """name -> (quantization_config, function(w, tensors) -> dequantised w)"""
    def ct_cfg(sym, group, bits=4):
        w = {"num_bits": bits, "type": "int", "symmetric": sym, "dynamic": False}
        w.update({"strategy": "group", "group_size": group} if group != -1 else {"strategy": "channel"})
        return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}}}
    gq = lambda group, sym, v2, bits=4: dict(GPTQ_CONFIG, group_size=group, sym=sym, desc_act=False, bits=bits,
                                             checkpoint_format="gptq_v2" if v2 else "gptq")

    def at8(fn):   # the same conversion at 8 bits (BITS is read when it runs)
        def run(w, t):
            global BITS
            BITS = 8
            try:
                return fn(w, t)
            finally:
                BITS = 4
        return run
    return {
        "gptq_v2_sym_g32": (gq(32, True, True), lambda w, t: gptq_convert(w, t, UNIT_BASE, None, 32, True, True)),
        "gptq_v1_sym_channel": (gq(-1, True, False), lambda w, t: gptq_convert(w, t, UNIT_BASE, None, -1, True, False)),
        "gptq_v2_asym_g16": (gq(16, False, True), lambda w, t: gptq_convert(w, t, UNIT_BASE, None, 16, False, True)),
        "ct_asym_g32": (ct_cfg(False, 32), lambda w, t: ct_convert(w, t, UNIT_BASE, False, 32)),
        "ct_sym_channel": (ct_cfg(True, -1), lambda w, t: ct_convert(w, t, UNIT_BASE, True, -1)),
        "ct_asym_channel": (ct_cfg(False, -1), lambda w, t: ct_convert(w, t, UNIT_BASE, False, -1)),
        # [w8a16] 8-bit GPTQ (4 values an int32) and compressed-tensors num_bits 8
        "gptq8_v1_asym_g32": (gq(32, False, False, 8), at8(lambda w, t: gptq_convert(w, t, UNIT_BASE, None, 32, False, False))),
        "gptq8_v2_sym_channel": (gq(-1, True, True, 8), at8(lambda w, t: gptq_convert(w, t, UNIT_BASE, None, -1, True, True))),
        "ct8_sym_g32": (ct_cfg(True, 32, 8), at8(lambda w, t: ct_convert(w, t, UNIT_BASE, True, 32))),
        "ct8_asym_channel": (ct_cfg(False, -1, 8), at8(lambda w, t: ct_convert(w, t, UNIT_BASE, False, -1))),
    }


def write_units(out_dir):
    """<variant>.safetensors: the packed tensors of UNIT_BASE plus UNIT_BASE.deq (float32 [out, in], the
    format's own dequantisation); <variant>.json: its quantization_config"""
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(PERM_SEED)
    # the 8-bit variants after the 4-bit ones: their draws from the shared generator leave the earlier data as it was
    for name, (qcfg, fn) in sorted(unit_variants().items(), key=lambda kv: ("8_" in kv[0], kv[0])):
        w = (torch.randn(UNIT_SHAPE, generator=g) * 0.1).to(torch.bfloat16).float()
        t = {}
        deq = fn(w, t)
        t[UNIT_BASE + ".deq"] = deq.float().contiguous()
        save_file(t, os.path.join(out_dir, name + ".safetensors"), metadata={"format": "pt"})
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(qcfg, f, indent=2, sort_keys=True)
            f.write("\n")
        print("  %s: %s" % (name, ", ".join("%s %s %s" % (k[len(UNIT_BASE) + 1:], str(v.dtype)[6:], list(v.shape))
                                           for k, v in sorted(t.items()))))


# ---- calibrated quantisers (--case ... --method awq|gptq): what published checkpoints are made with ----
# Both run the HF model (float32, CPU) over calibration text -- TRAINING text (e.g. the demo corpus's
# train.txt.xz of launch/train_demo/prepare_corpus.sh), never the held-out text the accuracy is measured
# on -- one decoder layer at a time, as AutoAWQ / AutoGPTQ do: the inputs of layer l are caught once at
# layer 0 (embeddings) and carried through the layers already quantised.
#   gptq  Frantar et al. (AutoGPTQ GPTQ.fasterquant): per linear the Hessian H = 2/n X^T X of its
#         calibration inputs, damping 0.01 * mean(diag H), columns in act-order (diag H descending) for
#         the gptq format -- groups follow that order and are stored through g_idx -- or in static
#         act-order for compressed-tensors (groups fixed beforehand on the weights' own columns, as
#         llm-compressor's actorder "static": no g_idx), blocks of 128 columns, the OBS update of the
#         columns not yet quantised after each column; true-sequential (q/k/v, then o, then gate/up, then
#         down, each from the outputs of the parts already quantised). Asymmetric (AutoGPTQ's min/max with
#         0 included) for gptq, symmetric (zero 8, scale max|w| / 7.5) for ct. The scales are rounded to
#         the checkpoint's dtype (fp16 / bf16) before the rounding of q, so the packed q are GPTQ's own.
#   awq   AutoAWQ (awq/quantize/quantizer.py): per layer, with the layer's float inputs, the per-input-channel
#         scale s = x_mean^a / w_mean^(1-a) (duo scaling; a on the 20-point grid 0, 0.05, .. 0.95,
#         normalised by sqrt(max s * min s)) minimising the MSE of the inspected module's output with the
#         scaled weights quantised: input_layernorm -> q/k/v (inspect self_attn), post_attention_layernorm ->
#         gate/up (inspect mlp), up -> down (inspect down); v -> o is skipped when their shapes differ (GQA),
#         as AutoAWQ does. s is folded into the previous op (the norm's weight, stored in the checkpoint,
#         or up_proj's rows) and multiplied into the linears; then the clipping search (auto_clip: per
#         group max|w| shrunk by 0 .. 0.45 of 20 steps, least MSE of the group's partial products over 512
#         calibration tokens; not for q / k) and AutoAWQ's zero-point round to nearest (min/max without 0).
CALIB_SEED = 25
GPTQ_BLOCK = 128


def calib_ids(path, tok_dir, n, seqlen, seed=CALIB_SEED):
    """[n, seqlen] token ids of text file `path` (.xz or plain; documents separated by a line holding one form
    feed, as prepare_corpus.sh writes them): the documents shuffled (seeded), each tokenised as the trainer
    does (<|begin_of_text|> text <|end_of_text|>), concatenated and cut into n windows"""
    import random
    from tokenizers import Tokenizer
    with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
        docs = [d.strip("\n") for d in f.read().split("\n\f\n") if d.strip()]
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    eot = tok.token_to_id("<|end_of_text|>")
    random.Random(seed).shuffle(docs)
    stream = []
    for d in docs:
        stream += tok.encode(d).ids + ([eot] if eot is not None else [])
        if len(stream) >= n * seqlen:
            break
    if len(stream) < n * seqlen:
        raise SystemExit("%s: %d tokens, fewer than the %d x %d asked for" % (path, len(stream), n, seqlen))
    return torch.tensor(stream[:n * seqlen]).view(n, seqlen)


def layer0_inputs(model, ids, batch=16):
    """[(hidden_states [b, T, hidden], layer kwargs)] per batch of ids: what the first decoder layer receives"""
    caught = []

    class Caught(Exception):
        pass

    def hook(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        caught.append((x, {k: kwargs[k] for k in ("attention_mask", "position_ids", "position_embeddings") if k in kwargs}))
        raise Caught

    h = model.model.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    for b in range(0, ids.shape[0], batch):
        try:
            model(ids[b:b + batch], use_cache=False)
        except Caught:
            pass
    h.remove()
    return caught


def linear_inputs(layer, names, xs):
    """run layer over xs, returning {name: [inputs [b, T, in] per batch]} of its submodules `names`"""
    got = {n: [] for n in names}
    mods = dict(layer.named_modules())
    hooks = [mods[n].register_forward_pre_hook(lambda m, a, n=n: got[n].append(a[0].detach())) for n in names]
    with torch.no_grad():
        for x, kw in xs:
            layer(x, **kw)
    for h in hooks:
        h.remove()
    return got


def gptq_params(x, sym, dtype):
    """AutoGPTQ's Quantizer.find_params per row of x [out, n] (min/max with 0 included), the scale rounded to
    the checkpoint's dtype -> (scale fp32 [out], zero fp32 [out])"""
    xmin, xmax = x.amin(1).clamp(max=0), x.amax(1).clamp(min=0)
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both0 = (xmin == 0) & (xmax == 0)
    xmin, xmax = torch.where(both0, -1.0, xmin), torch.where(both0, 1.0, xmax)
    scale = ((xmax - xmin) / 15).to(dtype).float()
    zero = torch.full_like(scale, 8.0) if sym else torch.round(-xmin / scale).clamp(0, 15)
    return scale, zero


def gptq_quantize(w, H, group, sym, act_order, static, dtype):
    """GPTQ (AutoGPTQ GPTQ.fasterquant, damping 0.01) of w [out, in] with Hessian H [in, in] ->
    (q int32 [out, in], zero int32 [out, ng], scale dtype [out, ng], perm or None, dequantised fp32 [out, in]);
    act_order: columns in descending diag(H) order; static: groups are the contiguous columns with their
    parameters from the unquantised weights (llm-compressor's actorder "static"), else group j is the j-th
    `group` columns in processing order (AutoGPTQ desc_act: perm returned for g_idx)"""
    W, H = w.clone().float(), H.clone()
    out, cols = W.shape
    ng, block = cols // group, max(GPTQ_BLOCK, group)
    assert block % group == 0
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    fixed = [gptq_params(W[:, g * group:(g + 1) * group], sym, dtype) for g in range(ng)] if static else None
    perm = torch.argsort(torch.diag(H), descending=True, stable=True) if act_order else torch.arange(cols)
    W, H = W[:, perm], H[perm][:, perm]
    H += 0.01 * torch.mean(torch.diag(H)) * torch.eye(cols)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    Q = torch.zeros(out, cols)
    scale, zero = torch.zeros(out, ng), torch.zeros(out, ng)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        W1, Err1, Hinv1 = W[:, i1:i2].clone(), torch.zeros(out, i2 - i1), Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            c = i1 + i
            if static:
                g = int(perm[c]) // group
                s, z = fixed[g]
                scale[:, g], zero[:, g] = s, z
            elif c % group == 0:
                s, z = gptq_params(W1[:, i:i + group], sym, dtype)
                scale[:, c // group], zero[:, c // group] = s, z
            q = torch.clamp(torch.round(W1[:, i] / s) + z, 0, 15)
            Q[:, c] = q
            err = (W1[:, i] - (q - z) * s) / Hinv1[i, i]
            W1[:, i:] -= err[:, None] @ Hinv1[i, i:][None, :]
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    inv = torch.argsort(perm)
    Q = Q[:, inv].to(torch.int32)
    gidx = (inv // group) if not static else torch.arange(cols) // group
    deq = (Q.float() - zero[:, gidx]) * scale[:, gidx]
    return Q, zero.to(torch.int32), scale.to(dtype), (perm if act_order and not static else None), deq


def awq_pseudo(w, group, dtype=None):
    """AutoAWQ's pseudo_quantize_tensor with zero point, per group of `group` along the last dim (min/max
    without 0) -> (dequantised w, q, zero, scale [.., ng]); dtype: round the scale to it first (the stored one)"""
    shape = w.shape
    x = w.reshape(-1, group)
    mx, mn = x.amax(1, keepdim=True), x.amin(1, keepdim=True)
    scale = (mx - mn).clamp(min=1e-5) / 15
    if dtype is not None:
        scale = scale.to(dtype).float()
    zero = (-torch.round(mn / scale)).clamp(0, 15)
    q = torch.clamp(torch.round(x / scale) + zero, 0, 15)
    ng = shape[-1] // group
    return ((q - zero) * scale).reshape(shape), q.reshape(shape), zero.reshape(*shape[:-1], ng), scale.reshape(*shape[:-1], ng)


def awq_search_scale(linears, xin, inspect, group):
    """AutoAWQ _search_best_scale: the per-input-channel scale of the linears (sharing inputs xin, a list of
    [b, T, in]) with the least MSE of inspect(batch index, x) against its float output"""
    with torch.no_grad():
        W = torch.cat([l.weight for l in linears], 0)
        wa = W.abs().view(-1, group)
        w_mean = (wa / (wa.amax(1, keepdim=True) + 1e-6)).view(W.shape).mean(0)
        x_mean = torch.cat([x.reshape(-1, x.shape[-1]) for x in xin]).abs().mean(0)
        ref = [inspect(b, x) for b, x in enumerate(xin)]
        orig = [l.weight.data.clone() for l in linears]
        best, best_s = float("inf"), None
        for r in range(20):
            a = r / 20
            s = (x_mean.pow(a) / (w_mean.pow(1 - a) + 1e-4)).clamp(min=1e-4)
            s = s / (s.max() * s.min()).sqrt()
            for l, w0 in zip(linears, orig):
                l.weight.data = awq_pseudo(w0 * s, group)[0] / s
            loss = sum(float((inspect(b, x) - ref[b]).float().pow(2).sum()) for b, x in enumerate(xin)) / \
                sum(r_.numel() for r_ in ref)
            if loss < best:
                best, best_s = loss, s.clone()
        for l, w0 in zip(linears, orig):
            l.weight.data = w0
    return best_s


def awq_clip(w, x, group, n_grid=20, max_shrink=0.5, n_tokens=512):
    """AutoAWQ _compute_best_clip: w [out, in] clamped per group to the +-max|w| shrink (0 .. max_shrink) with the
    least MSE of the group's partial products over n_tokens inputs of x [N, in]"""
    out, inp = w.shape
    ng = inp // group
    x = x[::max(1, x.shape[0] // n_tokens)].reshape(1, -1, ng, group)
    w4 = w.reshape(out, 1, ng, group)
    best_all = []
    for o0 in range(0, out, 64):
        wb = w4[o0:o0 + 64]
        org_max = wb.abs().amax(-1, keepdim=True)
        best, min_err = org_max.clone(), torch.full_like(org_max, float("inf"))
        org_out = (x * wb).sum(-1)
        for i_s in range(int(max_shrink * n_grid)):
            mv = org_max * (1 - i_s / n_grid)
            qw = awq_pseudo(torch.clamp(wb, -mv, mv), group)[0]
            err = ((x * qw).sum(-1) - org_out).pow(2).mean(1).view(min_err.shape)
            better = err < min_err
            min_err[better], best[better] = err[better], mv[better]
        best_all.append(best)
    mv = torch.cat(best_all).reshape(out, ng, 1)
    return torch.clamp(w.reshape(out, ng, group), -mv, mv).reshape(out, inp)


def calibrate(fmt, src_dir, tensors, calib_path, n, seqlen):
    """fmt's published quantiser (awq: AWQ; gptq: GPTQ act-order asymmetric fp16 scales; ct: GPTQ static act-order
    symmetric bf16 scales, as llm-compressor's W4A16) of every block linear, calibrated on calib_path ->
    {linear prefix: (q, zero, scale, perm)}; AWQ's folded scales update the norm weights in `tensors`"""
    torch.manual_seed(CALIB_SEED)
    model = transformers.AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.float32)
    model.eval()
    ids = calib_ids(calib_path, src_dir, n, seqlen)
    print("calibration: %d x %d tokens of %s" % (n, seqlen, calib_path))
    calib = {}
    with torch.no_grad():
        xs = layer0_inputs(model, ids)
        for li, layer in enumerate(model.model.layers):
            pre = "model.layers.%d." % li
            if fmt == "awq":
                awq_layer(layer, pre, xs, tensors, calib)
                xs = [(layer(x, **kw), kw) for x, kw in xs]   # AutoAWQ: the next inputs from the float layer
            else:
                gptq_layer(layer, pre, xs, calib, sym=fmt == "ct", static=fmt == "ct",
                           dtype=torch.bfloat16 if fmt == "ct" else torch.float16)
                xs = [(layer(x, **kw), kw) for x, kw in xs]   # from the quantised layer (true sequential)
            print("  layer %d quantised" % li, flush=True)
    return calib


SEQUENTIAL = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
              ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",))


def gptq_layer(layer, pre, xs, calib, sym, static, dtype):
    mods = dict(layer.named_modules())
    for names in SEQUENTIAL:
        xin = torch.cat([x.reshape(-1, x.shape[-1]) for x in linear_inputs(layer, names[:1], xs)[names[0]]]).double()
        H = (2.0 / xin.shape[0] * xin.t() @ xin).float()
        for name in names:
            q, zero, scale, perm, deq = gptq_quantize(mods[name].weight.data, H, GROUP, sym, True, static, dtype)
            mods[name].weight.data = deq
            calib[pre + name] = (q, zero, scale, perm)


def awq_layer(layer, pre, xs, tensors, calib):
    mods = dict(layer.named_modules())
    feats = linear_inputs(layer, ("self_attn.q_proj", "mlp.gate_proj", "mlp.down_proj", "self_attn.o_proj"), xs)
    attn = lambda b, x: layer.self_attn(hidden_states=x, **xs[b][1])[0]
    qkv = [mods[n] for n in SEQUENTIAL[0]]
    gu = [mods[n] for n in SEQUENTIAL[2]]
    down = mods["mlp.down_proj"]
    # every scale searched on the unscaled layer, then applied (AutoAWQ's order)
    s_qkv = awq_search_scale(qkv, feats["self_attn.q_proj"], attn, GROUP)
    s_gu = awq_search_scale(gu, feats["mlp.gate_proj"], lambda b, x: layer.mlp(x), GROUP)
    s_down = awq_search_scale([down], feats["mlp.down_proj"], lambda b, x: down(x), GROUP)
    for norm, lins, s, feat in (("input_layernorm", qkv, s_qkv, "self_attn.q_proj"),
                                ("post_attention_layernorm", gu, s_gu, "mlp.gate_proj")):
        key = pre + norm + ".weight"
        old = tensors[key].float()
        new = (old / s).to(tensors[key].dtype)                  # the norm is stored in the checkpoint's dtype:
        s = torch.where(new.float() != 0, old / new.float(), s)  # scale the linears by what it holds
        tensors[key] = new
        mods[norm].weight.data = new.float()
        for l in lins:
            l.weight.data *= s
        feats[feat] = [x / s for x in feats[feat]]
    mods["mlp.up_proj"].weight.data /= s_down[:, None]
    down.weight.data *= s_down
    feats["mlp.down_proj"] = [x / s_down for x in feats["mlp.down_proj"]]
    feats["mlp.up_proj"] = feats["mlp.gate_proj"]
    feats["self_attn.v_proj"] = feats["self_attn.q_proj"]
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj"):
        w = mods[name].weight.data
        if name not in ("self_attn.q_proj", "self_attn.k_proj"):   # AutoAWQ clips all but q / k
            x = torch.cat([f.reshape(-1, f.shape[-1]) for f in feats[name]])
            w = awq_clip(w, x, GROUP)
        _, q, zero, scale = awq_pseudo(w, GROUP, torch.float16)
        calib[pre + name] = (q.to(torch.int32), zero.to(torch.int32), scale.to(torch.float16), None)


def quantize_tensors(fmt, tensors, perm_seed=PERM_SEED, calib=None):
    """every block linear of `tensors` in format fmt -> (checkpoint tensors, dequantised fp32 tensors);
    calib: {linear prefix: (q, zero, scale, perm or None)} of a calibrated quantiser, else round to nearest"""
    qt, deq = {}, {}
    gen = torch.Generator().manual_seed(perm_seed)
    perms = {}
    for k in sorted(tensors):
        t = tensors[k]
        if not is_linear(k):
            qt[k] = t.contiguous()
            deq[k] = t.float().contiguous()
            continue
        prefix = k[:-len(".weight")]
        w = t.float()
        if calib is not None:
            q, zero, scale, perm = calib[prefix]
            qz = (q, zero, scale)
            deq[k] = awq_convert(w, qt, prefix, qz) if fmt == "awq" else \
                gptq_convert(w, qt, prefix, perm, qz=qz) if fmt == "gptq" else ct_convert(w, qt, prefix, qz=qz)
        elif fmt == "awq":
            deq[k] = awq_convert(w, qt, prefix)
        elif fmt == "gptq":
            # one act-order permutation per layer input: q/k/v share the attention input, gate/up the MLP's
            layer = prefix.rsplit(".", 2)[0]
            key = (layer, "qkv" if prefix.endswith(("q_proj", "k_proj", "v_proj")) else
                   "gu" if prefix.endswith(("gate_proj", "up_proj")) else prefix)
            if key not in perms:
                perms[key] = torch.randperm(w.shape[1], generator=gen)
            deq[k] = gptq_convert(w, qt, prefix, perms[key])
        else:
            deq[k] = ct_convert(w, qt, prefix)
    return qt, deq


def quant_config(fmt):
    return {"awq": AWQ_CONFIG, "gptq": GPTQ_CONFIG}.get(fmt) or ct_config()


def write_case(src, fmt, group, out_dir, calib_path=None, calib_n=128, calib_len=512, deq_dir=None):
    """A model without a reference: fixture `src` (or the model directory src) in format fmt with groups of
    `group` (tests/integration/int4.sh makes refusal inputs at run time, when torch is there; the
    per-format accuracy of bench/RESULTS.md is measured on the demo model written this way). With
    calib_path: the format's published quantiser calibrated on that text (calibrate), else round to nearest."""
    global GROUP, BITS
    GROUP = group
    if fmt in ("gptq8", "ct8"):   # [w8a16] the 8-bit variants
        fmt, BITS = fmt[:-1], 8
    src_dir = src if os.path.isdir(src) else os.path.join(gf.FIXTURE_ROOT, src)
    tensors = load_file(os.path.join(src_dir, "model.safetensors"))
    calib = calibrate(fmt, src_dir, tensors, calib_path, calib_n, calib_len) if calib_path else None
    qt, deq = quantize_tensors(fmt, tensors, calib=calib)
    os.makedirs(out_dir, exist_ok=True)
    save_file(qt, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    qc = json.loads(json.dumps(quant_config(fmt)))
    if fmt == "ct":
        qc["config_groups"]["group_0"]["weights"]["group_size"] = group
        if calib:
            qc["config_groups"]["group_0"]["weights"]["actorder"] = "static"
    else:
        qc["group_size"] = group
        qc["bits"] = BITS
    if deq_dir:   # the format's own dequantisation as a plain fp32 checkpoint: what a correct loader computes
        os.makedirs(deq_dir, exist_ok=True)
        save_file(deq, os.path.join(deq_dir, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(deq_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    cfg["quantization_config"] = qc
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for d in (out_dir, deq_dir) if deq_dir else (out_dir,):
        for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(src_dir, f)):
                shutil.copy(os.path.join(src_dir, f), d)


def convert(fmt, src_dir, out_dir, name, src_name, perm_seed=PERM_SEED):
    qt, deq = quantize_tensors(fmt, load_file(os.path.join(src_dir, "model.safetensors")), perm_seed)
    # the independent reference: HF on an fp32 checkpoint of the dequantised values
    spec = dict(gf.MODELS[src_name])
    spec["all_logits_prompt"] = ALL_LOGITS_PROMPT
    return gf.write_quantised(src_dir, out_dir, name, spec, qt, deq, quant_config(fmt))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the fixtures in place")
    ap.add_argument("--check", action="store_true", help="regenerate to a temp dir and compare")
    ap.add_argument("--src", default="qwen3_tied", help="source fixture (default qwen3_tied)")
    ap.add_argument("--units", action="store_true",
                    help="with --write: (re)write tests/unit/data/int4 (one linear per format variant) instead")
    ap.add_argument("--case", nargs=4, metavar=("SRC", "FMT", "GROUP", "DIR"),
                    help="write fixture (or model directory) SRC in format FMT with groups of GROUP into DIR, no reference")
    ap.add_argument("--calib", metavar="TEXT",
                    help="with --case: quantise with the format's published quantiser (awq: AWQ; gptq, ct: GPTQ) calibrated "
                         "on TEXT (.txt or .txt.xz, documents separated by form-feed lines; training text, never the "
                         "evaluation's), instead of round to nearest")
    ap.add_argument("--calib-samples", type=int, default=128, help="calibration windows (default 128)")
    ap.add_argument("--deq", metavar="DIR", help="with --case: also write the format's dequantisation of it as a plain fp32 "
                    "checkpoint into DIR (FMT gptq8 / ct8: the 8-bit variants)")
    ap.add_argument("--ids", nargs=5, metavar=("MODEL", "TEXT", "N", "LEN", "OUT"),
                    help="write N windows of LEN token ids of TEXT (tokenised with MODEL's tokenizer, as --calib does) to OUT "
                         "as {\"ids\": [...]}: a larger held-out evaluation set for bench/sits-fp8-accuracy --text")
    ap.add_argument("--calib-len", type=int, default=512, help="tokens per calibration window (default 512)")
    ap.add_argument("formats", nargs="*", default=list(FORMATS), help="awq, gptq, ct (default all)")
    args = ap.parse_args()
    if args.ids:
        model, text, n, seqlen, out = args.ids
        ids = calib_ids(text, model, int(n), int(seqlen))
        with open(out, "w") as f:
            json.dump({"what": "%s windows of %s ids of %s (documents shuffled with seed %d)" % (n, seqlen, text, CALIB_SEED),
                       "ids": ids.tolist()}, f)
        return 0
    if args.case:
        write_case(args.case[0], args.case[1], int(args.case[2]), args.case[3], args.calib, args.calib_samples, args.calib_len,
                   args.deq)
        return 0
    write = args.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not args.check:
        ap.print_help()
        return 0
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.units:
        write_units(UNIT_DIR if write else tempfile.mkdtemp(prefix="sits-int4-units-"))
        return 0
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    ok = True
    tmp = tempfile.mkdtemp(prefix="sits-int4-fixture-")
    try:
        for fmt in args.formats:
            name = "%s_%s" % (args.src, fmt)
            src_dir = os.path.join(gf.FIXTURE_ROOT, args.src)
            dest = os.path.join(gf.FIXTURE_ROOT, name)
            stage = os.path.join(tmp, name)
            # act-order permutations are re-drawn (seeds PERM_SEED, PERM_SEED + 1, ...) until every greedy
            # decision of the dequantised model is clear (gen_fixtures.py's GAP_MIN); the other formats have no
            # randomness
            for seed in range(PERM_SEED, PERM_SEED + (20 if fmt == "gptq" else 1)):
                shutil.rmtree(stage, ignore_errors=True)
                ref, info = convert(fmt, src_dir, stage, name, args.src, seed)
                if ref is not None:
                    break
            if ref is None:
                raise SystemExit("%s: the dequantised model has no clear greedy decisions (%s)" % (name, info))
            print("%s: %d bytes, max|logit| %.3f, min greedy gap %.4f"
                  % (name, gf.dir_bytes(stage), info["max_abs_logit"], info["min_greedy_gap"]))
            if args.check:
                old = os.path.join(tmp, "committed-" + name)
                if os.path.isdir(dest):
                    shutil.copytree(dest, old)
                    xz_dir(old, True)
                same = gf.compare_dirs(name, stage, old)
                ok = ok and same
                print("%s: %s" % (name, "matches committed fixture" if same else "MISMATCH"))
            if write:
                if os.path.isdir(dest):
                    shutil.rmtree(dest)
                shutil.copytree(stage, dest)
                xz_dir(dest, False)
                for f in sorted(os.listdir(dest)):
                    print("  %s/%s %d" % (name, f, os.path.getsize(os.path.join(dest, f))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
