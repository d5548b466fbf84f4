#!/usr/bin/env python3
"""gen_bf16_err.py MODEL_DIR...: how far HF transformers itself lands from the fp32 reference when it
runs in bf16, per logits row of reference.json -- the yardstick of the GPU fixture test
(tests/integration/test_fixtures.c, SITS_TEST_DEVICE=cuda): a row may deviate by up to twice what
HF's own bf16 forward does (and at least the generic 4 % of the row's max |logit| + 0.02).

Writes MODEL_DIR/bf16_err.json:
  {"generator": {...}, "last_logits": [max |bf16 - ref| per prompt],
   "all_logits": [max |bf16 - ref| per position of prompt all_logits_prompt (+ its greedy tokens)]}
Same inputs as gen_fixtures.py: each prompt alone (last position), and the all_logits sequence."""
import json, sys
import torch, transformers
from transformers import AutoModelForCausalLM


def main(dirs):
    for d in dirs:
        r = json.load(open(d + "/reference.json"))
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).eval()
        out = {"generator": {"script": "tests/ref/gen_bf16_err.py", "torch": torch.__version__,
                             "transformers": transformers.__version__}}
        with torch.no_grad():
            last = []
            for p, ref in zip(r["prompts"], r["last_logits"]):
                lg = m(torch.tensor([p])).logits[0, -1].float()
                last.append(float((lg - torch.tensor(ref)).abs().max()))
            k = r["all_logits_prompt"]
            n = len(r["all_logits"])
            ids = (r["prompts"][k] + r["greedy"][k])[:n]
            lg = m(torch.tensor([ids])).logits[0].float()
            allv = [float(x) for x in (lg - torch.tensor(r["all_logits"])).abs().max(-1).values]
        out["last_logits"] = [round(x, 6) for x in last]
        out["all_logits"] = [round(x, 6) for x in allv]
        with open(d + "/bf16_err.json", "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(d, "max last %.4f all %.4f" % (max(last), max(allv)))


if __name__ == "__main__":
    main(sys.argv[1:])
