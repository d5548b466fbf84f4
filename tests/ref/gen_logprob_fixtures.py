#!/usr/bin/env python3
"""Reference log-probabilities from HF transformers for the logprobs / echo tests.

Purpose: for each committed fixture checkpoint (tests/fixtures/models/*) and the demo model
  (models/demo), load it with transformers in float32 on the CPU (eager attention) and write
  tests/fixtures/logprobs/<name>.json with, for each prompt (token ids, those of the model's
  reference.json, or fixed ids for the demo model):
    prompt_logprobs[i]  log_softmax(logits[i-1])[prompt[i]] for i >= 1 (what echo + logprobs returns)
    prompt_top[i]       the 5 best (id, logprob) of that row, best first, ties to the lower id
    greedy              8 greedy tokens (argmax over the full-recompute fp32 logits)
    greedy_logprobs     their log-probabilities, greedy_top their rows' 5 best (id, logprob)
  The values are log_softmax of the raw logits: no temperature or other transform.
  controls: greedy continuations under the sampling controls, HF logits processors on HF fp32 logits
    (params: the request fields): repetition_penalty (RepetitionPenaltyLogitsProcessor), presence /
    frequency penalties (vLLM's / OpenAI's definition over the generated tokens, written out below),
    logit_bias (SequenceBiasLogitsProcessor with single-token sequences), min_tokens
    (MinNewTokensLengthLogitsProcessor on the eos ids), in vLLM's order: bias and min_tokens, then
    repetition, then frequency + presence; generation stops at an eos id (included) or max_tokens.
Modes: --write (or SITS_REGEN=1) writes the files; --check recomputes and compares with them.
Needs: torch, transformers (tests/ref/requirements.txt).
"""
import argparse
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
MODELS = ["llama_small", "llama3", "qwen2", "mistral_sharded"]
N_GREEDY, N_TOP = 8, 5
DEMO_PROMPTS = [[8181, 1000, 2000, 345, 17], [8181, 77, 4242, 901, 3000, 12, 5, 6000, 310, 2]]


def top(row, k):
    # best first, ties to the lower id (the server's order): sort by (-logprob, id)
    vals, ids = torch.sort(row, descending=True, stable=True)
    return [[int(i), float(v)] for v, i in zip(vals[:k], ids[:k])]


def reference(model_dir, prompts):
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = list(p)
            lp = torch.log_softmax(m(torch.tensor([ids])).logits[0].float(), dim=-1)
            rec = {"prompt": list(p), "prompt_logprobs": [None], "prompt_top": [None]}
            for i in range(1, len(p)):
                rec["prompt_logprobs"].append(float(lp[i - 1, p[i]]))
                rec["prompt_top"].append(top(lp[i - 1], N_TOP))
            rec["greedy"], rec["greedy_logprobs"], rec["greedy_top"] = [], [], []
            for _ in range(N_GREEDY):
                row = torch.log_softmax(m(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
                t = top(row, N_TOP)
                rec["greedy"].append(t[0][0])
                rec["greedy_logprobs"].append(t[0][1])
                rec["greedy_top"].append(t)
                ids.append(t[0][0])
            out.append(rec)
    return out


def controls_cases(name, prompts, eos):
    p0, p1 = prompts[1], prompts[-1]
    cases = [
        ({"repetition_penalty": 1.5}, p0), ({"repetition_penalty": 0.7}, p1),
        ({"presence_penalty": 2.0, "frequency_penalty": 2.0}, p0), ({"frequency_penalty": -2.0}, p1),
        ({"presence_penalty": -2.0}, p0), ({"presence_penalty": 2.0, "repetition_penalty": 1.3}, p1),
        ({"logit_bias": {"5": 12.0, "7": -100.0}}, p0),
        ({"logit_bias": {str(eos[0]): 40.0}, "min_tokens": 4}, p0),   # eos wins as soon as it may
        ({"logit_bias": {str(eos[0]): 40.0}}, p0),                    # ... which is at once without min_tokens
    ]
    return cases


def controls(model_dir, prompts, eos):
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    out = []
    with torch.no_grad():
        for params, p in controls_cases(model_dir, prompts, eos):
            ids = list(p)
            gen = []
            for step in range(N_GREEDY):
                x = torch.tensor([ids])
                l = m(x).logits[:, -1].float()
                bias = {(int(k),): float(v) for k, v in params.get("logit_bias", {}).items()}
                if bias:
                    l = transformers.SequenceBiasLogitsProcessor(sequence_bias=bias)(x, l)
                if params.get("min_tokens"):
                    l = transformers.MinNewTokensLengthLogitsProcessor(len(p), params["min_tokens"], eos)(x, l)
                if params.get("repetition_penalty", 1.0) != 1.0:
                    l = transformers.RepetitionPenaltyLogitsProcessor(params["repetition_penalty"])(x, l)
                pres, freq = params.get("presence_penalty", 0.0), params.get("frequency_penalty", 0.0)
                for t in set(gen):
                    l[0, t] -= freq * gen.count(t) + pres
                t = int(torch.argmax(l[0]))
                gen.append(t)
                ids.append(t)
                if t in eos:
                    break
            out.append({"params": params, "prompt": list(p), "greedy": gen})
            print(" ", os.path.basename(model_dir), params, gen)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("only", nargs="*", help="model names (default: all)")
    a = ap.parse_args()
    write = a.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not a.check:
        ap.error("pass --write or --check")
    todo = [(n, os.path.join(TOP, "tests/fixtures/models", n)) for n in MODELS] + [("demo", os.path.join(TOP, "models/demo"))]
    if a.only:
        todo = [t for t in todo if t[0] in a.only]
    bad = 0
    for name, d in todo:
        prompts = DEMO_PROMPTS if name == "demo" else json.load(open(os.path.join(d, "reference.json")))["prompts"]
        doc = {"generator": {"script": "tests/ref/gen_logprob_fixtures.py", "transformers": transformers.__version__,
                             "torch": torch.__version__}, "model": name, "n_top": N_TOP,
               "items": reference(d, prompts)}
        if name in ("llama_small", "demo"):
            cfg = json.load(open(os.path.join(d, "config.json")))
            eos = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], list) else [cfg["eos_token_id"]]
            doc["eos"] = eos
            doc["controls"] = controls(d, prompts, eos)
        path = os.path.join(TOP, "tests/fixtures/logprobs", name + ".json")
        if write:
            with open(path, "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
            print("wrote", path)
        else:
            old = json.load(open(path))
            if old.get("controls") != doc.get("controls"):
                print(name, "controls differ"); bad += 1
            for x, y in zip(old["items"], doc["items"]):
                if x["greedy"] != y["greedy"]:
                    print(name, "greedy differs"); bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
