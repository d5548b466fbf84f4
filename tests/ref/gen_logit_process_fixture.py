#!/usr/bin/env python3
"""Reference values of the device sampling controls and logprobs ops (tests/unit/test_logit_process.c).

Purpose: random fp32 logit rows over a vocabulary of V ids (not a multiple of 64, so the shards of a
  TP split are uneven), each with a prompt and a generated-token history and a set of request
  controls; HF transformers' logits processors give the expected values:
    processed   [id, value] of the ids the controls change (null: -inf), after SequenceBiasLogitsProcessor (logit_bias, single-token sequences),
                MinNewTokensLengthLogitsProcessor (min_tokens: eos ids banned while fewer were
                generated), RepetitionPenaltyLogitsProcessor (prompt + generated ids), then the
                presence / frequency penalties (vLLM's / OpenAI's definition over the generated
                tokens, written out: HF has none) -- vLLM's order
    min_p_keep  ids kept by TemperatureLogitsWarper(T) then MinPLogitsWarper(min_p) on `processed`
                (rows with min_p only)
    lse, top    log-sum-exp of the raw row and its 5 best (id, log_softmax), ties to the lower id
    targets     [id, log_softmax(raw)[id]] for a few ids
  All torch float32 on the CPU. Writes tests/fixtures/logprobs/logit_process.json.
Modes: --write (or SITS_REGEN=1) writes the file; --check recomputes and compares with it.
Needs: torch, transformers (tests/ref/requirements.txt).
"""
import argparse
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "fixtures", "logprobs", "logit_process.json")
V, EOS = 1000, [3, 7]

CASES = [
    {"repetition_penalty": 1.3},
    {"presence_penalty": 0.7, "frequency_penalty": 0.4},
    {"logit_bias": {"11": 5.0, "12": -100.0, "500": 2.5, "999": 0.75}, "min_tokens": 20},
    {"repetition_penalty": 0.8, "presence_penalty": -0.5, "frequency_penalty": 1.1, "logit_bias": {"40": -3.0, "41": 4.0}},
    {"min_p": 0.05, "temperature": 0.7, "repetition_penalty": 1.2},
    {},
    {"min_p": 0.2, "temperature": 1.0, "frequency_penalty": 0.5},
    {"logit_bias": {"3": 1.0}, "min_tokens": 5, "presence_penalty": 2.0},
]


def top(row, k):
    vals, ids = torch.sort(row, descending=True, stable=True)
    return [[int(i), float(v)] for v, i in zip(vals[:k], ids[:k])]


def make():
    g = torch.Generator().manual_seed(1234)
    rows = []
    for n, params in enumerate(CASES):
        logits = (torch.randn(V, generator=g) * 3.0).float()
        # a few large values so the penalties and min_p bite on ids that matter
        prompt = torch.randint(0, V, (24,), generator=g).tolist() + [int(torch.argmax(logits))]
        gen = torch.randint(0, V, (6,), generator=g).tolist()
        gen += gen[:3] + [int(torch.topk(logits, 3).indices[1])] * 2   # repeats: counts > 1
        ids = torch.tensor([prompt + gen])
        l = logits.clone().unsqueeze(0)
        bias = {(int(k),): float(v) for k, v in params.get("logit_bias", {}).items()}
        if bias:
            l = transformers.SequenceBiasLogitsProcessor(sequence_bias=bias)(ids, l)
        if params.get("min_tokens", 0) > len(gen):
            l = transformers.MinNewTokensLengthLogitsProcessor(len(prompt), params["min_tokens"], EOS)(ids, l)
        if params.get("repetition_penalty", 1.0) != 1.0:
            l = transformers.RepetitionPenaltyLogitsProcessor(params["repetition_penalty"])(ids, l)
        pres, freq = params.get("presence_penalty", 0.0), params.get("frequency_penalty", 0.0)
        if pres or freq:
            for t in sorted(set(gen)):
                l[0, t] -= freq * gen.count(t) + pres
        # processed: only the ids whose value changed, [id, value] with null for -inf (strict JSON)
        changed = [[i, None if l[0, i] == -float("inf") else float(l[0, i])] for i in range(V) if l[0, i] != logits[i]]
        rec = {"params": params, "prompt": prompt, "generated": gen, "logits": [float(x) for x in logits],
               "processed": changed}
        if params.get("min_p"):
            w = transformers.TemperatureLogitsWarper(params["temperature"])(ids, l.clone())
            w = transformers.MinPLogitsWarper(params["min_p"])(ids, w)
            rec["min_p_keep"] = [i for i in range(V) if w[0, i] != -float("inf")]
        lp = torch.log_softmax(logits, dim=-1)
        rec["lse"] = float(torch.logsumexp(logits.double(), dim=-1))
        rec["top"] = top(lp, 5)
        rec["targets"] = [[t, float(lp[t])] for t in (prompt[0], gen[-1], int(torch.argmax(l[0])), V - 1)]
        rows.append(rec)
    return {"generator": {"script": "tests/ref/gen_logit_process_fixture.py", "transformers": transformers.__version__,
                          "torch": torch.__version__}, "vocab": V, "eos": EOS, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    write = a.write or os.environ.get("SITS_REGEN") == "1"
    if not write and not a.check:
        ap.error("pass --write or --check")
    doc = make()
    if write:
        with open(OUT, "w") as f:
            json.dump(doc, f, allow_nan=False)
            f.write("\n")
        print("wrote", OUT)
        return 0
    old = json.load(open(OUT))
    bad = sum(x["processed"] != y["processed"] or x.get("min_p_keep") != y.get("min_p_keep")
              for x, y in zip(old["rows"], doc["rows"]))
    print("rows differing:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
