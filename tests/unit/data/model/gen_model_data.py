#!/usr/bin/env python3
"""Generate the committed inputs of the model-layer unit tests (tests/unit/test_model_*.c).

Run from anywhere: python3 tests/unit/data/model/gen_model_data.py
Needs torch, safetensors and transformers (written with torch 2.15, safetensors 0.8.0, transformers 5.24.0).

Writes, next to this script:
  good.safetensors       BF16 / F16 / F32 / I64 tensors (and a 0-d and an empty one) via safetensors.torch.save_file
  good_expected.json     {name: {dtype, shape, values}}: values are the stored numbers as torch reads them back (.tolist())
  rope_expected.json     [{name, config, inv_freq}]: inv_freq from transformers' LlamaRotaryEmbedding(config).inv_freq
                         (modeling_rope_utils, e.g. _compute_llama3_parameters, _compute_yarn_parameters; Phi3RotaryEmbedding
                         for partial rotary: rope_dim / 2 entries), config the config.json dict the C test parses
                         (only this file: `python3 -c "import gen_model_data as g; g.rope_cases()"` from this directory)
  tiny_llama/            random tiny LlamaForCausalLM (bf16, GQA) via save_pretrained, sharded (model.safetensors.index.json)
  tiny_qwen2/            random tiny Qwen2ForCausalLM (bf16, q/k/v bias, tied embeddings), one model.safetensors
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers import Phi3Config
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))


def good_file():
    t = {
        "w.bf16": torch.tensor([[1.0, -2.5, 3.140625, 0.0], [-0.0, 1e-3, 65280.0, -1e20],
                                [1e-38, 0.333, -7.75, 2.0 ** -133]]).to(torch.bfloat16),
        "w.f16": torch.tensor([[0.5, -1.0, 65504.0], [6e-8, -3.1416, 1e-5]]).to(torch.float16),
        "w.f32": torch.tensor([3.14159265, -1e-30, 1e30, 1.0 / 3.0, -0.0], dtype=torch.float32),
        "scalar.f32": torch.tensor(42.5, dtype=torch.float32),
        "empty.f32": torch.zeros((0, 4), dtype=torch.float32),
        "ids.i64": torch.tensor([0, -1, 2 ** 40], dtype=torch.int64),
    }
    save_file(t, os.path.join(HERE, "good.safetensors"), metadata={"format": "pt", "note": "unit test"})
    dt = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64"}
    exp = {}
    for k, v in t.items():
        vals = v.reshape(-1).tolist() if v.dtype == torch.int64 else v.float().reshape(-1).tolist()
        exp[k] = {"dtype": dt[v.dtype], "shape": list(v.shape), "values": vals}
    with open(os.path.join(HERE, "good_expected.json"), "w") as f:
        json.dump(exp, f, indent=1)


def rope_cases():
    base = {"model_type": "llama", "vocab_size": 128, "intermediate_size": 64, "num_hidden_layers": 1,
            "hidden_act": "silu"}
    cases = [
        # Meta-Llama-3.1-8B as older transformers wrote it: rope_scaling with rope_type llama3.
        ("llama31_rope_scaling", dict(base, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                      max_position_embeddings=131072, rope_theta=500000.0,
                                      rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 8192,
                                                    "rope_type": "llama3"})),
        # Llama-3.2-1B numbers, head_dim 64, in the legacy `type` spelling.
        ("llama32_type_key", dict(base, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                                  head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
                                  rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 8192, "type": "llama3"})),
        ("linear_type_key", dict(base, hidden_size=4096, num_attention_heads=32, max_position_embeddings=8192,
                                 rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 4.0})),
        ("llama2_default", dict(base, hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096)),
        ("theta_1e6_default", dict(base, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
                                   rope_theta=1000000.0, max_position_embeddings=32768)),
    ]
    out = []
    for name, d in cases:
        cfg = LlamaConfig.from_dict(dict(d))
        inv = LlamaRotaryEmbedding(config=cfg).inv_freq
        out.append({"name": name, "config": d, "inv_freq": inv.float().tolist()})
    # transformers v5 spelling, exactly as save_pretrained writes it (rope_parameters with rope_theta inside).
    cfg = LlamaConfig.from_dict(dict(cases[0][1]))
    d = cfg.to_dict()
    assert "rope_parameters" in d and "rope_scaling" not in d
    out.append({"name": "llama31_rope_parameters_v5", "config": d,
                "inv_freq": LlamaRotaryEmbedding(config=cfg).inv_freq.float().tolist()})
    # [rope] YaRN (_compute_yarn_parameters) as Qwen2.5 / Qwen3 model cards add it, and with the optional keys; Phi-4-mini's
    # partial rotary (Phi3RotaryEmbedding: inv_freq over the 96 rotary dims of 128, longrope's short factors at init).
    yarn = [
        ("yarn_qwen_card", dict(base, hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                max_position_embeddings=32768, rope_theta=1000000.0,
                                rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})),
        ("yarn_mscale_no_truncate", dict(base, hidden_size=2048, num_attention_heads=16, max_position_embeddings=163840,
                                         rope_theta=10000.0,
                                         rope_scaling={"rope_type": "yarn", "factor": 40.0, "mscale": 0.707,
                                                       "mscale_all_dim": 0.707, "beta_fast": 24, "beta_slow": 2,
                                                       "original_max_position_embeddings": 4096, "truncate": False})),
    ]
    for name, d in yarn:
        cfg = LlamaConfig.from_dict(dict(d))
        out.append({"name": name, "config": d, "inv_freq": LlamaRotaryEmbedding(config=cfg).inv_freq.float().tolist()})
    phi4mini = {"model_type": "phi3", "vocab_size": 128, "hidden_size": 3072, "intermediate_size": 64, "num_hidden_layers": 1,
                "num_attention_heads": 24, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
                "rope_scaling": {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(48)],
                                 "long_factor": [1.0 + 0.5 * i for i in range(48)]}}
    cfg = Phi3Config.from_dict(dict(phi4mini))
    out.append({"name": "phi4_mini_partial_longrope", "config": phi4mini,
                "inv_freq": Phi3RotaryEmbedding(config=cfg).inv_freq.float().tolist()})
    with open(os.path.join(HERE, "rope_expected.json"), "w") as f:
        json.dump(out, f, indent=1)


def tiny_models():
    torch.manual_seed(0)
    c = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    m = LlamaForCausalLM(c).to(torch.bfloat16)
    m.save_pretrained(os.path.join(HERE, "tiny_llama"), max_shard_size="20KB")
    c = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    m = Qwen2ForCausalLM(c).to(torch.bfloat16)
    m.save_pretrained(os.path.join(HERE, "tiny_qwen2"))


if __name__ == "__main__":
    good_file()
    rope_cases()
    tiny_models()
