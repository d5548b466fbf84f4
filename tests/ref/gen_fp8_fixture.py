#!/usr/bin/env python3
"""[fp8] Convert a committed fixture model into an FP8 checkpoint as published on the HF hub.

Purpose: write tests/fixtures/models/<src>_fp8/ (default src: llama3; also qwen3_moe, whose experts'
  gate/up/down are linears of the blocks too, the router not) laid out like an
  llm-compressor "FP8_DYNAMIC" checkpoint: every linear weight of the blocks (q/k/v/o/gate/up/down)
  stored as F8_E4M3 with a per-output-channel float32 `<name>.weight_scale` [out, 1]
  (scale = absmax(row) / 448, q = e4m3(w / scale), torch's round-to-nearest-even cast after a
  clamp to +-448), no input_scale (activations are quantised per token at run time); embeddings,
  norms and lm_head kept in the source dtype (`"ignore": ["lm_head"]`); config.json gains the
  compressed-tensors `quantization_config`. reference.json (same format as gen_fixtures.py) holds
  the logits and greedy tokens of the DEQUANTISED model (w = float(q) * scale) computed by HF
  transformers in float32 from an independent fp32 checkpoint of those values, so a loader that
  dequantises correctly (sits-dist --quant bf16) must reproduce it exactly like the other fixtures.

[fp8 block] --block BM,BN writes <src>_fp8_block/ instead: quant_method "fp8" with weight_block_size [BM, BN] as
  Qwen3-*-FP8 and DeepSeek-V3 publish it (F8_E4M3 weight, float32 `weight_scale_inv` [ceil(out / BM), ceil(in / BN)],
  one absmax / 448 per block); the script also checks that transformers' own loader of that checkpoint (on the CPU
  it dequantises) gives exactly the dequantised values the reference is computed from.

Modes (nothing is written unless asked):
  python3 tests/ref/gen_fp8_fixture.py --write [src]   (or SITS_REGEN=1 ...): write the fixture
  python3 tests/ref/gen_fp8_fixture.py --check [src]   regenerate into a temp dir and compare
Deterministic: the source fixture is committed and the conversion has no randomness.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as gf  # noqa: E402  (compute_reference, write_reference, MODELS, make_prompts)
import gen_moe_fixtures as gm  # noqa: E402  ([moe fp8] qwen3_moe -> qwen3_moe_fp8: FP8 experts too)

gf.MODELS.update(gm.MOE_MODELS)

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FP8_MAX = 448.0

QUANT_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                        "dynamic": False, "observer": "minmax"},
            "input_activations": {"num_bits": 8, "type": "float", "symmetric": True,
                                  "strategy": "token", "dynamic": True, "observer": None},
        }
    },
    "ignore": ["lm_head"],
}


def is_linear(name):
    return name.startswith("model.layers.") and name.endswith(".weight") and \
        any("." + l + "." in name for l in LINEARS)


def quantize(w):
    """w [out, in] -> (q float8_e4m3fn [out, in], scale float32 [out, 1])."""
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quantize_block(w, block):
    """[fp8 block] w [out, in] -> (q float8_e4m3fn [out, in], scale_inv float32 [ceil(out / bm), ceil(in / bn)]): each
    bm x bn block (the last ones partial) scaled by its own absmax / 448, as DeepSeek-V3 / Qwen3-FP8 checkpoints store
    them (`weight_scale_inv`, the factor that dequantises: w = q * scale_inv)."""
    w = w.float()
    bm, bn = block
    rows, cols = w.shape
    nr, nc = -(-rows // bm), -(-cols // bn)
    scale = torch.ones(nr, nc)
    for i in range(nr):
        for j in range(nc):
            amax = w[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn].abs().amax()
            if amax > 0:
                scale[i, j] = amax / FP8_MAX
    full = scale.repeat_interleave(bm, 0)[:rows].repeat_interleave(bn, 1)[:, :cols]
    q = (w / full).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale, q.float() * full


def convert(src_dir, out_dir, name, src_name, block=None):
    tensors = load_file(os.path.join(src_dir, "model.safetensors"))
    fp8, deq = {}, {}
    for k in sorted(tensors):
        t = tensors[k]
        if is_linear(k) and block:
            q, s, d = quantize_block(t, block)
            fp8[k] = q.contiguous()
            fp8[k + "_scale_inv"] = s.contiguous()
            deq[k] = d.contiguous()
        elif is_linear(k):
            q, s = quantize(t)
            fp8[k] = q.contiguous()
            fp8[k + "_scale"] = s.contiguous()
            deq[k] = (q.float() * s).contiguous()
        else:
            fp8[k] = t.contiguous()
            deq[k] = t.float().contiguous()
    qconfig = QUANT_CONFIG if not block else {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                              "weight_block_size": list(block)}
    # the independent reference: HF on an fp32 checkpoint of the dequantised values
    ref, info = gf.write_quantised(src_dir, out_dir, name, gf.MODELS[src_name], fp8, deq, qconfig)
    if ref is None:
        raise SystemExit("%s: the dequantised model has no clear greedy decisions (%s)" % (name, info))
    if block:   # and those values are what transformers' own loader of the block checkpoint makes of it (CPU: dequantised)
        m = transformers.AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
        sd = m.state_dict()
        for k, v in deq.items():
            if k not in sd:   # transformers 5 holds the experts fused: experts.gate_up_proj [E, 2I, H], experts.down_proj
                pre, _, rest = k.partition(".experts.")
                e, part = int(rest.split(".")[0]), rest.split(".")[1]
                fused = sd[pre + ".experts." + ("down_proj" if part == "down_proj" else "gate_up_proj")][e].float()
                half = fused.shape[0] // 2
                got = fused if part == "down_proj" else fused[:half] if part == "gate_proj" else fused[half:]
            else:
                got = sd[k].float()
            assert torch.equal(got, v), "%s: transformers dequantises %s otherwise" % (name, k)
    n_q = sum(1 for k in fp8 if k.endswith(("_scale", "_scale_inv")))
    return n_q, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the fixture in place")
    ap.add_argument("--check", action="store_true", help="regenerate to a temp dir and compare")
    ap.add_argument("src", nargs="?", default="llama3", help="source fixture (default llama3)")
    ap.add_argument("--block", help="[fp8 block] BM,BN: quant_method fp8 with weight_block_size [BM, BN] -> <src>_fp8_block")
    args = ap.parse_args()
    block = tuple(int(x) for x in args.block.split(",")) if args.block else None
    write = args.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not args.check:
        ap.print_help()
        return 0
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    name = args.src + ("_fp8_block" if block else "_fp8")
    src_dir = os.path.join(gf.FIXTURE_ROOT, args.src)
    dest = os.path.join(gf.FIXTURE_ROOT, name)
    tmp = tempfile.mkdtemp(prefix="sits-fp8-fixture-")
    ok = True
    try:
        stage = os.path.join(tmp, name)
        n_q, info = convert(src_dir, stage, name, args.src, block)
        size = gf.dir_bytes(stage)
        assert size <= gf.MAX_DIR_BYTES, size
        print("%s: %d fp8 linears, %d bytes, max|logit| %.3f, min greedy gap %.4f"
              % (name, n_q, size, info["max_abs_logit"], info["min_greedy_gap"]))
        if args.check:
            ok = gf.compare_dirs(name, stage, dest)
            print("%s: %s" % (name, "matches committed fixture" if ok else "MISMATCH"))
        if write:
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            shutil.copytree(stage, dest)
            for f in sorted(os.listdir(dest)):
                print("  %s/%s %d" % (name, f, os.path.getsize(os.path.join(dest, f))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
