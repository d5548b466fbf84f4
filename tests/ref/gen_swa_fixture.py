#!/usr/bin/env python3
"""Generate the sliding-window fixture tests/fixtures/models/mistral_swa/ with HF transformers.

Purpose: a tiny random-weight Mistral checkpoint whose every layer is a sliding-window layer
  (sliding_window 16) and long greedy continuations computed by HF transformers, for
  tests/integration/swa_free.sh: sits-dist gives the KV blocks that fall out of the window back to
  the pool, and its greedy tokens over generations many windows long must still equal these.
  Files: config.json, generation_config.json, model.safetensors (bf16), reference.json with
  "prompts" and "greedy" (one row per line, as tests/ref/gen_fixtures.py writes them) and "window".

Modes (nothing is written unless asked):
  python3 tests/ref/gen_swa_fixture.py --write     (or SITS_REGEN=1 ...) rewrite the fixture in place
  python3 tests/ref/gen_swa_fixture.py --check     regenerate into a temporary directory and compare

Invariants (asserted; the weights are re-seeded until they hold):
  - the reference is computed in float32 from the checkpoint as loaded back from disk (eager attention);
  - at every greedy step, HF generate's token equals a plain argmax over a full recomputation of the
    sequence (the sliding-window mask, no cache), and best - second-best logit >= GAP_MIN on both;
  - the window matters: greedy decoding of the same weights with sliding_window=None differs for
    the longest prompt (so a run that attends beyond the window fails the test);
  - the directory stays under MAX_DIR_BYTES.
"""

import argparse
import filecmp
import json
import os
import platform
import shutil
import sys
import tempfile

import safetensors
import torch
import transformers
from transformers import MistralConfig, MistralForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
DEST = os.path.normpath(os.path.join(HERE, "..", "fixtures", "models", "mistral_swa"))

NAME = "mistral_swa"
WINDOW = 16
GAP_MIN = 5e-3   # long generations: a clear margin over fp32 summation-order differences
MAX_DIR_BYTES = 200_000
PROMPT_LENS = [5, 40]
NEW_TOKENS = [150, 120]
PROMPT_SEED = 4321
SEED = 7000
MAX_RESEEDS = 60
CFG = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=8, vocab_size=97, max_position_embeddings=512,
           rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=WINDOW,
           bos_token_id=1, eos_token_id=2, hidden_act="silu", attention_dropout=0.0,
           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def versions():
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "script": "tests/ref/gen_swa_fixture.py"}


def prompts():
    g = torch.Generator().manual_seed(PROMPT_SEED)
    return [torch.randint(3, CFG["vocab_size"], (n,), generator=g).tolist() for n in PROMPT_LENS]


def build(seed, out_dir):
    cfg = MistralConfig(**CFG)
    cfg.pad_token_id = None
    torch.manual_seed(seed)
    model = MistralForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.35 * torch.randn(p.shape, generator=g))
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)


def greedy(model, prompt, n):
    """HF generate's greedy continuation and its raw logits, plus the full-recompute check."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                         min_new_tokens=n, pad_token_id=CFG["eos_token_id"], output_logits=True,
                         return_dict_in_generate=True)
    cont = out.sequences[0, len(prompt):].tolist()
    assert len(cont) == n
    seq, gap = list(prompt), float("inf")
    for step in range(n):
        lg = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        t1, t2 = torch.topk(lg, 2), torch.topk(out.logits[step][0].float(), 2)
        if int(t1.indices[0]) != cont[step] or int(t2.indices[0]) != cont[step]:
            return None, "step %d: recomputed argmax %d, generate %d" % (step, int(t1.indices[0]), cont[step])
        gap = min(gap, float(t1.values[0] - t1.values[1]), float(t2.values[0] - t2.values[1]))
        if gap < GAP_MIN:
            return None, "step %d: gap %.3g < %g" % (step, gap, GAP_MIN)
        seq.append(cont[step])
    return cont, gap


def generate(out_dir):
    ps = prompts()
    for k in range(MAX_RESEEDS):
        seed = SEED + k
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        build(seed, out_dir)
        model = MistralForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
        conts, why, min_gap = [], None, float("inf")
        with torch.no_grad():
            for p, n in zip(ps, NEW_TOKENS):
                c, info = greedy(model, p, n)
                if c is None:
                    why = info
                    break
                conts.append(c)
                min_gap = min(min_gap, info)
            if why is None:
                full = MistralForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager",
                                                          sliding_window=None).eval()
                ids = torch.tensor([ps[-1]])
                alt = full.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=NEW_TOKENS[-1], min_new_tokens=NEW_TOKENS[-1],
                                    pad_token_id=CFG["eos_token_id"])[0, len(ps[-1]):].tolist()
                if alt == conts[-1]:
                    why = "the window does not change the greedy tokens"
        if why is None:
            break
        print("%s: seed %d rejected (%s)" % (NAME, seed, why), file=sys.stderr)
    else:
        raise SystemExit("%s: no seed in %d tries" % (NAME, MAX_RESEEDS))
    gen = versions()
    gen["weights_seed"] = seed
    gen["prompt_seed"] = PROMPT_SEED
    lines = ["{", '  "generator": %s,' % json.dumps(gen, sort_keys=True), '  "model": "%s",' % NAME,
             '  "window": %d,' % WINDOW, '  "min_greedy_gap": %.4g,' % min_gap, '  "prompts": [',
             ",\n".join("    " + json.dumps(p) for p in ps), "  ],", '  "greedy": [',
             ",\n".join("    " + json.dumps(c) for c in conts), "  ]", "}"]
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        f.write("\n".join(lines) + "\n")
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    assert size <= MAX_DIR_BYTES, "%d bytes > %d" % (size, MAX_DIR_BYTES)
    print("%s: seed %d, %d bytes, min greedy gap %.4f" % (NAME, seed, size, min_gap))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the fixture in place")
    ap.add_argument("--check", action="store_true", help="regenerate to a temporary directory and compare")
    a = ap.parse_args()
    write = a.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not a.check:
        ap.print_help()
        return 0
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    tmp = tempfile.mkdtemp(prefix="sits-swa-")
    try:
        stage = os.path.join(tmp, NAME)
        generate(stage)
        if a.check:
            ok = os.path.isdir(DEST)
            for f in sorted(os.listdir(stage)) if ok else []:
                if f == "reference.json":
                    same = json.load(open(os.path.join(stage, f)))["greedy"] == json.load(open(os.path.join(DEST, f)))["greedy"]
                else:
                    same = os.path.exists(os.path.join(DEST, f)) and filecmp.cmp(os.path.join(stage, f), os.path.join(DEST, f), False)
                if not same:
                    print("%s: %s differs" % (NAME, f))
                    ok = False
            print("%s: %s" % (NAME, "matches the committed fixture" if ok else "MISMATCH"))
            return 0 if ok else 1
        shutil.rmtree(DEST, ignore_errors=True)
        shutil.copytree(stage, DEST)
        for f in os.listdir(DEST):
            os.chmod(os.path.join(DEST, f), 0o644)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
