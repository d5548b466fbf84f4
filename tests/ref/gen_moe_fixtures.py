#!/usr/bin/env python3
"""Generate the tiny random-weight Mixture-of-Experts reference checkpoints (issue 24).

Purpose: tests/fixtures/models/{mixtral,qwen2_moe,qwen3_moe}/ in the format of tests/ref/gen_fixtures.py
  (config.json, generation_config.json, model.safetensors, reference.json of HF float32 logits and
  greedy tokens, eager attention), with that script's machinery and invariants (weights rounded to
  the stored dtype first, greedy gap >= GAP_MIN, generate == plain argmax, size limit).
  Only the model table differs:
    mixtral    MixtralForCausalLM, 8 experts, top-2 (softmax -> top-k -> renormalised), bf16;
    qwen2_moe  Qwen2MoeForCausalLM, 8 experts, top-2, norm_topk_prob false, shared expert with its
               sigmoid gate, q/k/v bias, tied embeddings, bf16.
    qwen3_moe  Qwen3MoeForCausalLM, 8 experts, top-2, norm_topk_prob true, no shared expert, Qwen3 attention
               (per-head q/k norms, head_dim 12), untied embeddings, bf16.
  8 experts so that expert parallelism over 2 and 4 ranks holds whole experts; expert intermediate
  sizes divisible by 4 for TP 4. Kept small (hidden 32, vocab ~128, the full logits of the 12-token
  prompt): about 100 KB a model.

Usage (nothing is written unless asked):
  python3 tests/ref/gen_moe_fixtures.py --write [mixtral qwen2_moe qwen3_moe]
  python3 tests/ref/gen_moe_fixtures.py --check
then, after --write, the GPU test's tolerances (HF's own bf16 error per row, bf16_err.json):
  python3 tests/ref/gen_bf16_err.py tests/fixtures/models/mixtral tests/fixtures/models/qwen2_moe tests/fixtures/models/qwen3_moe
"""

import os
import sys

import torch
from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402

MOE_MODELS = {
    "mixtral": dict(
        cls=MixtralForCausalLM, cfg_cls=MixtralConfig, dtype=torch.bfloat16, shards=1, seed=7000,
        all_logits_prompt=2, linear_std=0.3, embed_std=0.5,
        cfg=dict(hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=128,
                 num_local_experts=8, num_experts_per_tok=2, router_jitter_noise=0.0,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 sliding_window=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2_moe": dict(
        cls=Qwen2MoeForCausalLM, cfg_cls=Qwen2MoeConfig, dtype=torch.bfloat16, shards=1, seed=8000,
        all_logits_prompt=2, linear_std=0.2, embed_std=0.5,
        cfg=dict(hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=120,
                 num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[],
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 use_sliding_window=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3_moe": dict(
        cls=Qwen3MoeForCausalLM, cfg_cls=Qwen3MoeConfig, dtype=torch.bfloat16, shards=1, seed=9000,
        all_logits_prompt=2, linear_std=0.2, embed_std=0.5,
        cfg=dict(hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=12, vocab_size=112,
                 num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                 decoder_sparse_step=1, mlp_only_layers=[], attention_bias=False,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 use_sliding_window=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}

_versions = g.versions
_reinit = g.reinit


def reinit(model, spec, seed):
    """gen_fixtures.reinit, then the routers (mlp.gate / block_sparse_moe.gate) scaled by ROUTER_SCALE: wide
    router logits keep the top-k choice clear of near ties, so that bf16 runs (the GPU test, HF's own
    bf16_err.json) route the tokens as the fp32 reference does."""
    _reinit(model, spec, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.mul_(ROUTER_SCALE)


ROUTER_SCALE = 4.0


def versions():
    v = _versions()
    v["script"] = "tests/ref/gen_moe_fixtures.py"
    return v


if __name__ == "__main__":
    g.MODELS.clear()
    g.MODELS.update(MOE_MODELS)
    g.versions = versions
    g.reinit = reinit
    sys.exit(g.main())
