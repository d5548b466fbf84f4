#!/usr/bin/env python3
"""Generate tiny random-weight HF reference checkpoints for the sits-dist tests.

Purpose: write tests/fixtures/models/<name>/ = config.json, generation_config.json,
  model.safetensors (or 2 shards + model.safetensors.index.json) and reference.json
  (expected fp32 logits and greedy tokens computed by HF transformers, eager attention).
  The C implementation loads the same checkpoint, converts the stored weights to fp32
  and must reproduce reference.json.  Format: tests/ref/README.md.

Modes (nothing is written unless asked):
  python3 tests/ref/gen_fixtures.py --write        (or SITS_REGEN=1 python3 tests/ref/gen_fixtures.py)
      regenerate every fixture in place (deterministic: same bytes on the same versions).
  python3 tests/ref/gen_fixtures.py --check
      regenerate into a temporary directory and compare with the committed fixtures.
  Either mode accepts model names to restrict the run, e.g. `--write llama3 qwen2`.

Invariants enforced (the script asserts, and re-seeds the weights until they hold):
  - weights are rounded to the stored dtype first; the reference is computed in float32
    from the checkpoint as loaded back from disk;
  - at every greedy step of every prompt, best - second-best logit >= GAP_MIN, and the
    HF `generate` continuation equals a plain argmax over full-recompute float32 logits
    (so the eos suppression of min_new_tokens never changes a decision);
  - each model directory is <= MAX_DIR_BYTES.
"""

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile

import safetensors
import tokenizers
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Gemma2Config, Gemma2ForCausalLM,
                          Gemma3TextConfig, Gemma3ForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration,
                          Qwen2_5_VLForConditionalGeneration, GraniteConfig, GraniteForCausalLM, GlmConfig, GlmForCausalLM,
                          Glm4Config, Glm4ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_ROOT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "models"))

GAP_MIN = 1e-3
MAX_DIR_BYTES = 2_000_000
NEW_TOKENS = 16
PROMPT_LENS = [1, 5, 12, 37]
PROMPT_SEED = 1234
MAX_RESEEDS = 50

def gemma3_mm_cfg(text):
    """[mm] Gemma3ForConditionalGeneration around the text config `text` (a tiny SigLIP tower that text prompts never
    reach; the image token outside the vocabulary)."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig
    vc = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                            patch_size=8)
    tc = Gemma3TextConfig(**{**COMMON_CFG, **text})
    return Gemma3Config(text_config=tc, vision_config=vc, mm_tokens_per_image=4, image_token_index=100000,
                        boi_token_index=100001, eoi_token_index=100002, bos_token_id=1, eos_token_id=2,
                        tie_word_embeddings=text["tie_word_embeddings"])


def gemma3_mm_hub_config(out_dir, spec):
    """[mm] config.json rewritten as google/gemma-3-*-it publish it: a text_config with only what differs from
    Gemma3TextConfig's defaults, RoPE in the older spelling (rope_scaling, global rope_theta 1e6 and the local 1e4 by
    default), sliding_window_pattern instead of layer_types. The reference is computed from this file."""
    path = os.path.join(out_dir, "config.json")
    cfg = json.load(open(path))
    t = spec["cfg"]
    cfg["text_config"] = {"head_dim": t["head_dim"], "hidden_size": t["hidden_size"], "intermediate_size": t["intermediate_size"],
                          "model_type": "gemma3_text", "num_attention_heads": t["num_attention_heads"],
                          "num_hidden_layers": t["num_hidden_layers"], "num_key_value_heads": t["num_key_value_heads"],
                          "query_pre_attn_scalar": t["query_pre_attn_scalar"], "rope_scaling": {"factor": 2.0, "rope_type": "linear"},
                          "sliding_window": t["sliding_window"], "sliding_window_pattern": 3, "vocab_size": t["vocab_size"],
                          "max_position_embeddings": t["max_position_embeddings"], "bos_token_id": 1, "eos_token_id": 2}
    cfg.pop("dtype", None)
    cfg["torch_dtype"] = "bfloat16"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")



def mistral3_mm_cfg(text):
    """[mm] Mistral3ForConditionalGeneration (Mistral-Small-3.1's class) around the Mistral text config `text`, a tiny
    Pixtral tower, the image token outside the vocabulary."""
    from transformers import Mistral3Config, PixtralVisionConfig
    vc = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                             patch_size=8, head_dim=8)
    return Mistral3Config(text_config=MistralConfig(**{**COMMON_CFG, **text}), vision_config=vc, image_token_index=100000,
                          tie_word_embeddings=text["tie_word_embeddings"])


def qwen2_5_vl_cfg(text):
    """[mm] Qwen2_5_VLForConditionalGeneration around the Qwen2 text config `text` (multimodal RoPE sections over the
    head's 8 pairs), a one-block vision tower, the vision tokens outside the vocabulary."""
    from transformers import Qwen2_5_VLConfig
    vc = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=text["hidden_size"], patch_size=2,
              spatial_merge_size=1, temporal_patch_size=1, window_size=4, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config={**COMMON_CFG, **text}, vision_config=vc, image_token_id=100000, video_token_id=100001,
                            vision_start_token_id=100002, vision_end_token_id=100003, bos_token_id=1, eos_token_id=2,
                            tie_word_embeddings=text["tie_word_embeddings"])


def qwen2_5_vl_hub_config(out_dir, spec):
    """[mm] config.json rewritten as Qwen/Qwen2.5-VL-*-Instruct publish it: the text keys at the top level beside
    vision_config, RoPE as rope_scaling {type: mrope, mrope_section} (transformers reads both layouts)."""
    path = os.path.join(out_dir, "config.json")
    cfg = json.load(open(path))
    text = cfg.pop("text_config")
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "vocab_size", "max_position_embeddings", "rms_norm_eps", "use_sliding_window", "sliding_window",
              "max_window_layers", "hidden_act", "attention_dropout"):
        if k in text:
            cfg[k] = text[k]
    cfg["rope_theta"] = text["rope_parameters"]["rope_theta"]
    cfg["rope_scaling"] = {"type": "mrope", "mrope_section": text["rope_parameters"]["mrope_section"]}
    cfg.pop("dtype", None)
    cfg["torch_dtype"] = "bfloat16"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


# Each model: HF classes, config kwargs, stored dtype, init stds, shard count, seed.
MODELS = {
    "llama3": dict(
        cls=LlamaForCausalLM, cfg_cls=LlamaConfig, dtype=torch.bfloat16, shards=1, seed=1000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=250,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 64})),
    # llama_hd128: head_dim 128 (Llama's own) and a 200-token prompt, so that a prompt runs the tensor-core
    # prefill attention kernels on the GPU (>= 64 tokens a step, head_dim 128: every variant, wgmma included,
    # in tests/gpu/prefill_kernels_cuda.sh); 2 q heads on one KV head. Its reference is HF in float64 (rounded to
    # fp32 in the file): over 200 positions HF's own fp32 forward strays up to 1.8e-4 from it (seed 1100, position
    # 39), past the CPU test's 1e-4.
    "llama_hd128": dict(
        cls=LlamaForCausalLM, cfg_cls=LlamaConfig, dtype=torch.bfloat16, shards=1, seed=1100, ref_dtype=torch.float64,
        all_logits_prompt=4, linear_std=0.25, embed_std=0.5, prompt_lens=PROMPT_LENS + [200],
        cfg=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=128, vocab_size=160,
                 max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "qwen2": dict(
        cls=Qwen2ForCausalLM, cfg_cls=Qwen2Config, dtype=torch.float32, shards=1, seed=2000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=301,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 use_sliding_window=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mistral_sharded": dict(
        cls=MistralForCausalLM, cfg_cls=MistralConfig, dtype=torch.float16, shards=2, seed=3000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=192, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=1, vocab_size=256,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 sliding_window=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "llama_small": dict(
        cls=LlamaForCausalLM, cfg_cls=LlamaConfig, dtype=torch.bfloat16, shards=1, seed=4000,
        all_logits_prompt=2, linear_std=0.2, embed_std=0.5,
        cfg=dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=4, vocab_size=512,
                 max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Qwen3: per-head q_norm / k_norm, head_dim (24) != hidden / heads (64 / 4 = 16), untied, 4 KV
    # heads (TP 1/2/4 without replication); qwen3_tied: tied embeddings, GQA 4/2, head_dim 32.
    "qwen3": dict(
        cls=Qwen3ForCausalLM, cfg_cls=Qwen3Config, dtype=torch.bfloat16, shards=1, seed=5000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=4, head_dim=24, vocab_size=203,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 use_sliding_window=False, attention_bias=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3_tied": dict(
        cls=Qwen3ForCausalLM, cfg_cls=Qwen3Config, dtype=torch.bfloat16, shards=1, seed=5100,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=160,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 use_sliding_window=False, attention_bias=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # qwen3_hd64: head_dim 64 (Qwen3's own is 128): the q / k RMSNorm then runs inside the fused rope + KV
    # write (head_dim % 64 == 0), on the cpu twin here and the cuda kernel in tests/gpu/families_cuda.sh.
    "qwen3_hd64": dict(
        cls=Qwen3ForCausalLM, cfg_cls=Qwen3Config, dtype=torch.bfloat16, shards=1, seed=5200,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=160,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 use_sliding_window=False, attention_bias=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 2: (1 + w) norms (stored near 1: 1 + w near 2), 4 norms a layer, GeGLU, embeddings x sqrt(64)
    # (a small embed_std: larger tied embeddings make every prompt continue with one token),
    # query_pre_attn_scalar 24 != head_dim 32, attention and final soft-capping small enough to bend the
    # logits, sliding window 8 on layers 0 and 2 (prompts of 12 and 37 tokens + 16 generated exceed it).
    "gemma2": dict(
        cls=Gemma2ForCausalLM, cfg_cls=Gemma2Config, dtype=torch.bfloat16, shards=1, seed=6000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.05, norm_center=1.0,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=211,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=24,
                 attn_logit_softcapping=3.0, final_logit_softcapping=2.0, sliding_window=8,
                 layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Gemma 3 text: as Gemma 2 without soft-capping, plus q_norm / k_norm (1 + w), local RoPE base
    # 10000 on sliding layers and a linearly scaled (factor 2) global base 1e6, 4 KV heads.
    "gemma3": dict(
        cls=Gemma3ForCausalLM, cfg_cls=Gemma3TextConfig, dtype=torch.bfloat16, shards=1, seed=7000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.05, norm_center=1.0,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=4, head_dim=32, vocab_size=173,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=32,
                 sliding_window=8,
                 layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                     "rope_theta": 1000000.0}})),
    # Phi-3: fused qkv_proj / gate_up_proj, longrope with original_max_position_embeddings 40 (factor 6.4,
    # attention_factor sqrt(1 + ln 6.4 / ln 40)): prompts of <= 37 tokens prefill with the short factors and
    # cross into the long ones while decoding (greedy by cached_greedy: the cached keys keep the short set);
    # a fifth prompt of 45 tokens prefills with the long ones. Sliding window 24 on every layer.
    "phi3": dict(
        cls=Phi3ForCausalLM, cfg_cls=Phi3Config, dtype=torch.bfloat16, shards=1, seed=8000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5, prompt_lens=PROMPT_LENS + [45], cached_greedy=True,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=229,
                 max_position_embeddings=256, original_max_position_embeddings=40, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, sliding_window=24, pad_token_id=None,
                 rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                  "original_max_position_embeddings": 40,
                                  "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0],
                                  "long_factor": [1.0, 1.3, 1.9, 2.8, 4.0, 6.0, 9.0, 12.0]})),
    # [rope] Phi-4-mini's shape of attention: partial_rotary_factor 0.75 at the top level of config.json (24 of 32 dims
    # rotate, pairs (i, i + 12); 8 pass), longrope factors for the rotary dims only (12), original length 40 (factor 6.4:
    # attention_factor 1.23 on the rotary dims alone), tied embeddings, as phi3 above otherwise.
    "phi3_partial": dict(
        cls=Phi3ForCausalLM, cfg_cls=Phi3Config, dtype=torch.bfloat16, shards=1, seed=8100,
        all_logits_prompt=3, linear_std=0.18, embed_std=0.5, prompt_lens=PROMPT_LENS + [45], cached_greedy=True,
        cfg=dict(hidden_size=128, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=229,
                 max_position_embeddings=256, original_max_position_embeddings=40, rms_norm_eps=1e-5,
                 tie_word_embeddings=True, sliding_window=None, pad_token_id=None, partial_rotary_factor=0.75,
                 rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                  "original_max_position_embeddings": 40,
                                  "short_factor": [1.0, 1.01, 1.03, 1.06, 1.1, 1.15, 1.2, 1.3, 1.4, 1.6, 1.8, 2.0],
                                  "long_factor": [1.0, 1.2, 1.5, 1.9, 2.5, 3.2, 4.0, 5.0, 6.5, 8.0, 10.0, 12.0]})),
    # [mm] gemma-3-4b / 12b / 27b-it's layout: Gemma3ForConditionalGeneration (tensors under language_model.model., a
    # vision tower beside them) with the gemma3 fixture's language model, config.json as the hub writes it
    # (gemma3_mm_hub_config: Gemma3TextConfig's defaults fill the rest); text prompts only.
    # [granite] Granite 3.x: Llama plus embedding_multiplier 12 (as granite-3.3-8b's), attention_multiplier 0.125 (not
    # 1 / sqrt(16)), residual_multiplier 0.22, logits_scaling 4, tied embeddings.
    "granite": dict(
        cls=GraniteForCausalLM, cfg_cls=GraniteConfig, dtype=torch.bfloat16, shards=1, seed=9000,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.1,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=181,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True,
                 embedding_multiplier=12.0, attention_multiplier=0.125, residual_multiplier=0.22, logits_scaling=4.0,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # [glm] GLM-4-9B-chat-hf (glm) and GLM-4-0414 (glm4): q/k/v biases, fused gate_up_proj, half of each head rotary with
    # interleaved pairs (2i, 2i + 1) (partial_rotary_factor left to its default 0.5), head_dim 32 given; glm4 also
    # normalises the attention and MLP outputs (post_self_attn_layernorm, post_mlp_layernorm).
    "glm": dict(
        cls=GlmForCausalLM, cfg_cls=GlmConfig, dtype=torch.bfloat16, shards=1, seed=9100,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=191,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "glm4": dict(
        cls=Glm4ForCausalLM, cfg_cls=Glm4Config, dtype=torch.bfloat16, shards=1, seed=9200,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=193,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # [smollm3] SmolLM3: Llama whose no_rope_layers 0 layers (1 and 3 here) use no positional embedding, with YaRN (factor
    # 2, original 64) on the others -- its attention factor on their cos / sin only -- and tied embeddings by default.
    "smollm3": dict(
        cls=SmolLM3ForCausalLM, cfg_cls=SmolLM3Config, dtype=torch.bfloat16, shards=1, seed=9300,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=187,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=None,
                 no_rope_layers=[1, 0, 1, 0],
                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                                  "original_max_position_embeddings": 64})),
    # [mm] Mistral-Small-3.1's layout: Mistral3ForConditionalGeneration, tensors under language_model.model., head_dim 24
    # given (!= hidden / heads), rope_theta 1e9 as that model's; text prompts only.
    "mistral3_mm": dict(
        cls=Mistral3ForConditionalGeneration, make_cfg=mistral3_mm_cfg, dtype=torch.bfloat16, shards=1, seed=3100,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=24, vocab_size=211,
                 max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000000.0})),
    # [mm] Qwen2.5-VL's layout: Qwen2_5_VLForConditionalGeneration, q/k/v biases, multimodal RoPE sections [2, 3, 3] (a
    # text token's one position in all three: plain RoPE), config.json flat as the hub publishes it.
    "qwen2_5_vl": dict(
        cls=Qwen2_5_VLForConditionalGeneration, make_cfg=qwen2_5_vl_cfg, hub_config=qwen2_5_vl_hub_config,
        dtype=torch.bfloat16, shards=1, seed=2100, all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=199,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 use_sliding_window=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})),
    "gemma3_mm": dict(
        cls=Gemma3ForConditionalGeneration, make_cfg=gemma3_mm_cfg, hub_config=gemma3_mm_hub_config, dtype=torch.bfloat16,
        shards=1, seed=7100, all_logits_prompt=3, linear_std=0.25, embed_std=0.05, norm_center=1.0,
        cfg=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=4, head_dim=32, vocab_size=173,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                 hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=32,
                 sliding_window=8, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                     "rope_theta": 1000000.0}})),
    # [rope] YaRN as Qwen's model cards add it for long contexts: factor 4, original_max_position_embeddings 64 (the
    # correction range, dims 0 .. 5 of 16 with beta 32 / 1 and theta 10000, blends interpolation and extrapolation),
    # attention_factor 0.1 ln 4 + 1 on cos and sin.
    "qwen3_yarn": dict(
        cls=Qwen3ForCausalLM, cfg_cls=Qwen3Config, dtype=torch.bfloat16, shards=1, seed=5300,
        all_logits_prompt=3, linear_std=0.25, embed_std=0.5,
        cfg=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=197,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 use_sliding_window=False, attention_bias=False,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 64})),
}

COMMON_CFG = dict(bos_token_id=1, eos_token_id=2, hidden_act="silu", attention_dropout=0.0)


def versions():
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "tokenizers": tokenizers.__version__, "script": "tests/ref/gen_fixtures.py"}


def make_prompts(vocab, lens=PROMPT_LENS):
    g = torch.Generator().manual_seed(PROMPT_SEED + vocab)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


def reinit(model, spec, seed):
    """Re-initialise every parameter with a fixed seed (HF's std 0.02 gives near-uniform logits)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if any(v in name for v in ("vision_tower", "multi_modal_projector", "visual.")):   # [mm] text prompts never reach them
                val = 0.02 * torch.randn(p.shape, generator=g)
            elif name.endswith("norm.weight"):
                val = spec.get("norm_center", 1.0) + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                val = 0.1 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                val = spec["embed_std"] * torch.randn(p.shape, generator=g)
            elif name.endswith((".weight", "experts.gate_up_proj", "experts.down_proj")):
                # (the last two: transformers 5's fused 3-D MoE expert parameters, saved per expert)
                val = spec["linear_std"] * torch.randn(p.shape, generator=g)
            else:
                raise AssertionError("unexpected parameter " + name)
            p.copy_(val)


def build_and_save(name, spec, seed, out_dir):
    if "make_cfg" in spec:
        cfg = spec["make_cfg"](spec["cfg"])
    else:
        cfg = spec["cfg_cls"](**{**COMMON_CFG, **spec["cfg"]})   # a spec may override a common key
    cfg.pad_token_id = None
    torch.manual_seed(seed)
    model = spec["cls"](cfg).eval()
    reinit(model, spec, seed)
    if spec["cfg"]["tie_word_embeddings"]:
        lm = getattr(model.model, "language_model", model.model)
        assert model.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr()
    model = model.to(spec["dtype"])       # round to the stored dtype first
    kw = {}
    if spec["shards"] > 1:
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        kw["max_shard_size"] = int(total * 0.6)
    model.save_pretrained(out_dir, safe_serialization=True, **kw)
    if "hub_config" in spec:
        spec["hub_config"](out_dir, spec)
    return model


def fmt(x):
    """float32 value -> shortest decimal with at most 9 significant digits (round-trips float32)."""
    v = float("%.9g" % float(x))
    assert math.isfinite(v)
    return repr(v)


def rows(mat):
    return [row for row in mat.tolist()]


def cached_greedy(model, prompt):
    """[families] Greedy decoding one forward call a token over a DynamicCache, without generate's
    Phi3ForCausalLM.prepare_inputs_for_generation, which drops the cache and recomputes the whole sequence
    when it first passes original_max_position_embeddings: here (as in sits-dist and vLLM) each call picks
    the longrope set from its own max(position_ids) + 1 and the cached keys keep the set they were written
    with. Returns an object with .sequences [1, T] and .logits (the raw logits of each step)."""
    from types import SimpleNamespace
    cache = transformers.DynamicCache(config=model.config)
    seq, logits = list(prompt), []
    ids = torch.tensor([prompt])
    pos = torch.arange(len(prompt))[None]
    for _ in range(NEW_TOKENS):
        out = model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True)
        lg = out.logits[:, -1].float()
        logits.append(lg)
        tok = int(lg[0].argmax())
        seq.append(tok)
        ids = torch.tensor([[tok]])
        pos = torch.tensor([[len(seq) - 1]])
    return SimpleNamespace(sequences=torch.tensor([seq]), logits=logits)


def compute_reference(out_dir, spec, prompts):
    """Load the saved checkpoint as float32 and compute logits / greedy tokens."""
    model = spec["cls"].from_pretrained(out_dir, dtype=spec.get("ref_dtype", torch.float32), attn_implementation="eager")
    model.eval()
    eos = getattr(model.config, "eos_token_id", None)
    if eos is None:   # [mm] Mistral3Config keeps it in text_config
        eos = model.config.text_config.eos_token_id
    last_logits, greedy, all_logits = [], [], None
    min_gap = float("inf")
    with torch.no_grad():
        for pi, prompt in enumerate(prompts):
            ids = torch.tensor([prompt], dtype=torch.long)
            full = model(input_ids=ids).logits[0].float()              # [T, V]
            last_logits.append(full[-1].clone())
            if pi == spec["all_logits_prompt"]:
                all_logits = full.clone()
            if spec.get("cached_greedy"):
                out = cached_greedy(model, prompt)
            else:
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                     pad_token_id=eos, output_logits=True,
                                     return_dict_in_generate=True)
            cont = out.sequences[0, ids.shape[1]:].tolist()
            assert len(cont) == NEW_TOKENS, (pi, cont)
            # independent check: plain argmax over full recomputation, no logits processors
            seq = list(prompt)
            for step in range(NEW_TOKENS):
                lg = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                top2 = torch.topk(lg, 2)
                gap = float(top2.values[0] - top2.values[1])
                raw = out.logits[step][0].float()                       # cached-path raw logits
                t2 = torch.topk(raw, 2)
                gap = min(gap, float(t2.values[0] - t2.values[1]))
                min_gap = min(min_gap, gap)
                tok = int(top2.indices[0])
                if spec.get("cached_greedy") and len(seq) > spec["cfg"]["original_max_position_embeddings"]:
                    # past the longrope switch the cached keys keep the short set: no full-recompute twin
                    tok = int(t2.indices[0])
                    gap = float(t2.values[0] - t2.values[1])
                if tok != cont[step] or int(t2.indices[0]) != tok:
                    return None, "prompt %d step %d: argmax %d != generate %d" % (
                        pi, step, tok, cont[step])
                if gap < GAP_MIN:
                    return None, "prompt %d step %d: gap %.3g < %g" % (pi, step, gap, GAP_MIN)
                seq.append(tok)
            greedy.append(cont)
    stats = {"min_greedy_gap": min_gap,
             "max_abs_logit": max(float(t.abs().max()) for t in last_logits + [all_logits]),
             "logit_std": sum(float(t.std()) for t in last_logits) / len(last_logits)}
    return dict(last_logits=last_logits, greedy=greedy, all_logits=all_logits), stats


def write_reference(path, name, seed, prompts, spec, ref):
    gen = versions()
    gen["weights_seed"] = seed
    if "ref_dtype" in spec:
        gen["reference_dtype"] = str(spec["ref_dtype"]).replace("torch.", "")
    gen["prompt_seed"] = PROMPT_SEED
    lines = ["{"]
    lines.append('  "generator": %s,' % json.dumps(gen, sort_keys=True))
    lines.append('  "model": %s,' % json.dumps(name))
    lines.append('  "prompts": [')
    lines.append(",\n".join("    " + json.dumps(p) for p in prompts))
    lines.append("  ],")
    lines.append('  "last_logits": [')
    lines.append(",\n".join("    [" + ",".join(fmt(x) for x in r.tolist()) + "]"
                            for r in ref["last_logits"]))
    lines.append("  ],")
    lines.append('  "greedy": [')
    lines.append(",\n".join("    " + json.dumps(g) for g in ref["greedy"]))
    lines.append("  ],")
    lines.append('  "all_logits_prompt": %d,' % spec["all_logits_prompt"])
    lines.append('  "all_logits": [')
    lines.append(",\n".join("    [" + ",".join(fmt(x) for x in r) + "]"
                            for r in ref["all_logits"].tolist()))
    lines.append("  ]")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    json.load(open(path))   # must parse


def write_quantised(src_dir, out_dir, name, spec, qtensors, deq, qconfig):
    """A quantised checkpoint of fixture src_dir in out_dir (tensors qtensors, config.json with
    quantization_config = qconfig, generation_config.json) and its reference.json: HF transformers run on an
    fp32 checkpoint of the dequantised values deq -- the independent reference the loader must match.
    Returns (ref, info); ref None when the dequantised model has no clear greedy decisions."""
    from safetensors.torch import save_file
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    os.makedirs(out_dir)
    save_file(qtensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    qcfg = dict(cfg)
    qcfg["quantization_config"] = qconfig
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(qcfg, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(os.path.join(src_dir, "generation_config.json"), out_dir)
    with tempfile.TemporaryDirectory(prefix="sits-deq-") as deq_dir:
        dcfg = dict(cfg)
        dcfg["dtype"] = "float32"
        with open(os.path.join(deq_dir, "config.json"), "w") as f:
            json.dump(dcfg, f)
        save_file(deq, os.path.join(deq_dir, "model.safetensors"), metadata={"format": "pt"})
        prompts = make_prompts(spec["cfg"]["vocab_size"])
        ref, info = compute_reference(deq_dir, spec, prompts)
        if ref is None:
            return None, info
        write_reference(os.path.join(out_dir, "reference.json"), name,
                        json.load(open(os.path.join(src_dir, "reference.json")))["generator"]["weights_seed"],
                        prompts, spec, ref)
    return ref, info


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def generate_one(name, out_dir):
    spec = MODELS[name]
    lens = spec.get("prompt_lens", PROMPT_LENS)
    prompts = make_prompts(spec["cfg"]["vocab_size"], lens)
    assert [len(p) for p in prompts] == lens
    for k in range(MAX_RESEEDS):
        seed = spec["seed"] + k
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        build_and_save(name, spec, seed, out_dir)
        ref, info = compute_reference(out_dir, spec, prompts)
        if ref is None:
            print("%s: seed %d rejected (%s), re-seeding" % (name, seed, info), file=sys.stderr)
            continue
        break
    else:
        raise SystemExit("%s: no seed in %d tries gives clear greedy decisions" % (name, MAX_RESEEDS))
    write_reference(os.path.join(out_dir, "reference.json"), name, seed, prompts, spec, ref)

    files = sorted(os.listdir(out_dir))
    st = [f for f in files if f.endswith(".safetensors")]
    assert len(st) == spec["shards"], (name, st)
    assert ("model.safetensors.index.json" in files) == (spec["shards"] > 1), files
    assert "generation_config.json" in files, files
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    gcfg = json.load(open(os.path.join(out_dir, "generation_config.json")))
    ids = cfg if "bos_token_id" in cfg else cfg["text_config"]   # [mm] Mistral3Config: in text_config only
    assert ids["bos_token_id"] == 1 and ids["eos_token_id"] == 2, cfg
    assert gcfg.get("bos_token_id") == 1 and gcfg.get("eos_token_id") == 2, gcfg
    size = dir_bytes(out_dir)
    assert size <= MAX_DIR_BYTES, "%s: %d bytes > %d" % (name, size, MAX_DIR_BYTES)
    info["seed"] = seed
    info["bytes"] = size
    return info


def compare_dirs(name, new_dir, old_dir, atol=1e-4, rtol=1e-4):
    """--check: committed fixture vs freshly generated one."""
    ok = True
    if not os.path.isdir(old_dir):
        print("%s: no committed fixture at %s" % (name, old_dir))
        return False
    for f in sorted(os.listdir(new_dir)):
        if f == "reference.json":
            continue
        p_old = os.path.join(old_dir, f)
        if not os.path.exists(p_old) or open(p_old, "rb").read() != open(
                os.path.join(new_dir, f), "rb").read():
            print("%s: %s differs" % (name, f))
            ok = False
    a = json.load(open(os.path.join(new_dir, "reference.json")))
    b = json.load(open(os.path.join(old_dir, "reference.json")))
    for key in ("prompts", "greedy", "all_logits_prompt"):
        if a[key] != b[key]:
            print("%s: reference %s differs" % (name, key))
            ok = False
    for key in ("last_logits", "all_logits"):
        errs = [abs(x - y) - (atol + rtol * abs(y))
                for ra, rb in zip(a[key], b[key]) for x, y in zip(ra, rb)]
        shape_ok = [len(r) for r in a[key]] == [len(r) for r in b[key]]
        worst = max(errs) if errs else 0.0
        if not shape_ok or worst > 0:
            print("%s: reference %s differs (excess error %.3g)" % (name, key, worst))
            ok = False
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="regenerate fixtures in place")
    ap.add_argument("--check", action="store_true", help="regenerate to a temp dir and compare")
    ap.add_argument("models", nargs="*", help="subset of: " + ", ".join(MODELS))
    args = ap.parse_args()
    write = args.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not args.check:
        ap.print_help()
        print("\nnothing done: pass --write (or set SITS_REGEN=1) to rewrite %s, or --check"
              % FIXTURE_ROOT)
        return 0
    names = args.models or list(MODELS)
    for n in names:
        if n not in MODELS:
            ap.error("unknown model " + n)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    all_ok = True
    tmp_root = tempfile.mkdtemp(prefix="sits-fixtures-")
    try:
        for n in names:
            stage = os.path.join(tmp_root, n)
            info = generate_one(n, stage)
            print("%-16s seed %d  %8d bytes  max|logit| %.3f  mean logit std %.3f  min greedy gap %.4f"
                  % (n, info["seed"], info["bytes"], info["max_abs_logit"], info["logit_std"],
                     info["min_greedy_gap"]))
            dest = os.path.join(FIXTURE_ROOT, n)
            if args.check:
                ok = compare_dirs(n, stage, dest)
                print("%s: %s" % (n, "matches committed fixture" if ok else "MISMATCH"))
                all_ok &= ok
            if write:
                if os.path.isdir(dest):
                    shutil.rmtree(dest)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copytree(stage, dest)
                for f in sorted(os.listdir(dest)):
                    print("  %s/%s %d" % (n, f, os.path.getsize(os.path.join(dest, f))))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
