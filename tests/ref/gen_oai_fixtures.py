#!/usr/bin/env python3
"""[gpt-oss] Generate the tiny random-weight OpenAI gpt-oss reference checkpoints.

Purpose: tests/fixtures/models/gpt_oss/ and gpt_oss_mxfp4/ in the format of tests/ref/gen_fixtures.py
  (config.json, generation_config.json, model.safetensors, reference.json of HF float32 logits and greedy tokens,
  eager attention), with that script's machinery and invariants.
    gpt_oss        GptOssForCausalLM as transformers saves it (bf16): attention sinks, q/k/v/o biases, sliding-window
                   layers (window 8) alternating with full ones, YaRN (gpt-oss's factor 32 over 4096), 8 experts top-2
                   with a biased router (softmax over the top-k logits), experts fused and transposed
                   (gate_up_proj [E, H, 2 I] with gate / up in alternate columns, down_proj [E, I, H]) with biases,
                   the clamped SwiGLU (swiglu_limit 2.0 here instead of 7.0, so that both clamps act on these
                   small weights; the loader reads it from config.json).
    gpt_oss_mxfp4  the same model with its experts in MXFP4 as openai/gpt-oss-* publish them (gate_up_proj_blocks
                   [E, 2 I, H / 32, 16] U8 + gate_up_proj_scales [E, 2 I, H / 32] U8 E8M0, down_proj_* likewise;
                   quantization_config quant_method mxfp4; the hub's rope_scaling / rope_theta config keys); its
                   reference is transformers run on an fp32 checkpoint of the dequantised values, and the script
                   asserts that transformers' own MXFP4 dequantiser (integrations.mxfp4.convert_moe_packed_tensors)
                   turns the written blocks and scales into exactly those values.
  8 experts so that expert parallelism over 2 and 4 ranks holds whole experts; hidden 64 and expert width 32
  (MXFP4 blocks of 32; TP 4 slices of 8).

Usage (nothing is written unless asked):
  python3 tests/ref/gen_oai_fixtures.py --write [gpt_oss gpt_oss_mxfp4]
  python3 tests/ref/gen_oai_fixtures.py --check
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
from transformers import GptOssConfig, GptOssForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402

ROUTER_SCALE = 4.0   # as gen_moe_fixtures.py: wide router logits keep the top-k clear of near ties
SINK_STD = 1.0       # sinks comparable to the attention logits, so that they matter

OAI_MODELS = {
    "gpt_oss": dict(
        cls=GptOssForCausalLM, cfg_cls=GptOssConfig, dtype=torch.bfloat16, shards=1, seed=12000,
        all_logits_prompt=2, linear_std=0.15, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=32, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
                 num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
                 swiglu_alpha=1.702, swiglu_limit=2.0, attention_bias=True,
                 max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096})),
}

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


_versions = g.versions


def versions():
    v = _versions()
    v["script"] = "tests/ref/gen_oai_fixtures.py"
    return v


def reinit(model, spec, seed):
    """gen_fixtures.reinit's scheme for gpt-oss's parameter names: sinks, the fused experts and their biases; the
    router scaled by ROUTER_SCALE."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                val = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif name.endswith((".bias", "_proj_bias")):
                val = 0.1 * torch.randn(p.shape, generator=gen)
            elif name.endswith("self_attn.sinks"):
                val = SINK_STD * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name:
                val = spec["embed_std"] * torch.randn(p.shape, generator=gen)
            elif name.endswith((".weight", "experts.gate_up_proj", "experts.down_proj")):
                val = spec["linear_std"] * torch.randn(p.shape, generator=gen)
                if name.endswith("mlp.router.weight"):
                    val = val * ROUTER_SCALE
            else:
                raise AssertionError("unexpected parameter " + name)
            p.copy_(val)


def mxfp4(w):
    """w [..., rows, cols] fp32 (cols % 32 == 0) -> (blocks [..., rows, cols / 32, 16] u8, scales [..., rows, cols / 32]
    u8, deq fp32): per block of 32 the smallest power-of-two scale 2^e with max|w| / 2^e <= 6, codes the nearest FP4
    values (ties to the lower code), element 2m in the low nibble."""
    *pre, rows, cols = w.shape
    blk = w.reshape(*pre, rows, cols // 32, 32)
    amax = blk.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -100)
    e = torch.ceil(torch.log2(amax / 6.0))
    x = blk / torch.pow(2.0, e)
    lut = torch.tensor(FP4_VALUES)
    codes = (x[..., None] - lut).abs().argmin(-1)                   # first (lowest) code among equals
    deq = lut[codes] * torch.pow(2.0, e)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    scales = (e[..., 0] + 127).to(torch.uint8)
    return packed, scales, deq.reshape(*pre, rows, cols)


def write_mxfp4(src_dir, out_dir):
    """gpt_oss_mxfp4 from the committed gpt_oss fixture (deterministic: no randomness)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    spec = OAI_MODELS["gpt_oss"]
    src = load_file(os.path.join(src_dir, "model.safetensors"))
    q, deq = {}, {}
    for name, t in sorted(src.items()):
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            w = t.float().transpose(1, 2).contiguous()                # [E, out, in] as the blocks are laid out
            blocks, scales, d = mxfp4(w)
            q[name + "_blocks"] = blocks
            q[name + "_scales"] = scales
            deq[name] = d.transpose(1, 2).contiguous()                # back to transformers' [E, in, out]
            hf = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
            assert torch.equal(hf, deq[name]), name + ": transformers dequantises the blocks differently"
        else:
            q[name] = t
            deq[name] = t.float()
    qconfig = {"quant_method": "mxfp4",
               "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                          "lm_head"]}
    ref, info = g.write_quantised(src_dir, out_dir, "gpt_oss_mxfp4", spec, q, deq, qconfig)
    if ref is None:
        raise SystemExit("gpt_oss_mxfp4: the dequantised model has no clear greedy decisions (%s)" % info)
    # the hub's config keys (transformers 4.55 wrote rope_scaling / rope_theta and experts_per_token)
    path = os.path.join(out_dir, "config.json")
    cfg = json.load(open(path))
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = rp
    cfg["experts_per_token"] = cfg["num_experts_per_tok"]
    cfg["initial_context_length"] = 4096
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    reloaded = transformers.AutoConfig.from_pretrained(out_dir)
    assert reloaded.rope_parameters["rope_type"] == "yarn" and reloaded.rope_parameters["factor"] == 32.0, reloaded
    info["bytes"] = g.dir_bytes(out_dir)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="regenerate fixtures in place")
    ap.add_argument("--check", action="store_true", help="regenerate to a temp dir and compare")
    ap.add_argument("models", nargs="*", help="subset of: gpt_oss, gpt_oss_mxfp4")
    args = ap.parse_args()
    write = args.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not args.check:
        ap.print_help()
        return 0
    names = args.models or ["gpt_oss", "gpt_oss_mxfp4"]
    g.MODELS.clear()
    g.MODELS.update(OAI_MODELS)
    g.versions = versions
    g.reinit = reinit
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    ok = True
    tmp = tempfile.mkdtemp(prefix="sits-oai-")
    try:
        for n in names:
            stage = os.path.join(tmp, n)
            if n == "gpt_oss":
                info = g.generate_one(n, stage)
            elif n == "gpt_oss_mxfp4":
                src = os.path.join(tmp, "gpt_oss") if "gpt_oss" in names else os.path.join(g.FIXTURE_ROOT, "gpt_oss")
                info = write_mxfp4(src, stage)
            else:
                ap.error("unknown model " + n)
            print("%-14s %s" % (n, json.dumps(info, sort_keys=True)))
            dest = os.path.join(g.FIXTURE_ROOT, n)
            if args.check:
                same = g.compare_dirs(n, stage, dest)
                print("%s: %s" % (n, "matches committed fixture" if same else "MISMATCH"))
                ok &= same
            if write:
                if os.path.isdir(dest):
                    shutil.rmtree(dest)
                shutil.copytree(stage, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
