#!/bin/bash
# [logprobs] A real client: lm-evaluation-harness (PyPI lm-eval) scores the local multiple-choice task
# tests/lm_eval/sits_mc (jsonl + YAML) on models/demo twice -- --model local-completions against
# sits-dist (echo + logprobs, batches of 4 prompts per request, 2 ranks: TP 2 on the CPU) and --model hf
# (transformers, fp32, CPU) -- and the two must agree: the same accuracy and every per-choice log-likelihood within 1e-3, the
# same is_greedy flags. Skips (77) when lm_eval (with its api extra: tenacity, aiohttp) is not importable.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
"$PY" -c 'import lm_eval, tenacity, aiohttp, transformers, torch' 2>/dev/null ||
  { echo "SKIP: lm-eval is not installed (pip install 'lm-eval[api]'; it needs torch and transformers)"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; rm -rf "$tmp"' EXIT
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$tmp/hf" TOKENIZERS_PARALLELISM=false
demo=$(cd "$top_srcdir/models/demo" && pwd)
cp "$top_srcdir"/tests/lm_eval/sits_mc.* "$tmp/"   # data_files is relative to the working directory
serve_np 2 "$demo" || finish
( cd "$tmp" && "$PY" -m lm_eval --model local-completions --tasks sits_mc --include_path . --batch_size 4 \
    --model_args "model=demo,base_url=$url/v1/completions,tokenizer=$demo,tokenizer_backend=huggingface,add_bos_token=True,num_concurrent=1,max_retries=1,tokenized_requests=True" \
    --output_path "$tmp/api" --log_samples ) > "$tmp/api.log" 2>&1 && ok "lm_eval local-completions ran" ||
  { bad "lm_eval local-completions"; tail -20 "$tmp/api.log"; }
kill -TERM $srv; wait $srv; srv=
( cd "$tmp" && "$PY" -m lm_eval --model hf --model_args "pretrained=$demo,dtype=float32" --device cpu --tasks sits_mc \
    --include_path . --batch_size 1 --output_path "$tmp/hf" --log_samples ) > "$tmp/hf.log" 2>&1 && ok "lm_eval hf ran" ||
  { bad "lm_eval hf"; tail -20 "$tmp/hf.log"; }
"$PY" - "$tmp" <<'PYEOF' && ok "lm_eval: sits-dist equals transformers (accuracy, log-likelihoods within 1e-3)" || bad "lm_eval: sits-dist vs transformers"
import glob, json, sys
t = sys.argv[1]
def load(kind):
    f = glob.glob(f"{t}/{kind}/*/samples_sits_mc_*.jsonl")
    assert len(f) == 1, f"{kind}: {f}"
    return {d["doc_id"]: d for d in map(json.loads, open(f[0]))}
a, b = load("api"), load("hf")
assert a.keys() == b.keys() and len(a) == 12, (len(a), len(b))
worst, bad = 0.0, []
for k in sorted(a):
    ra, rb = a[k]["resps"], b[k]["resps"]
    for c, (x, y) in enumerate(zip(ra, rb)):
        (lx, gx), (ly, gy) = x[0], y[0]
        d = abs(float(lx) - float(ly))
        worst = max(worst, d)
        if d > 1e-3 or gx != gy:
            bad.append(f"doc {k} choice {c}: sits-dist {lx} {gx}, hf {ly} {gy}")
    if a[k]["acc"] != b[k]["acc"]:
        bad.append(f"doc {k}: acc {a[k]['acc']} vs {b[k]['acc']}")
acc_a = sum(d["acc"] for d in a.values()) / len(a)
acc_b = sum(d["acc"] for d in b.values()) / len(b)
for m in bad[:10]:
    print("  mismatch", m)
print(f"  accuracy sits-dist {acc_a:.4f} hf {acc_b:.4f}; max |loglikelihood diff| {worst:.2e} over {sum(len(d['resps']) for d in a.values())} choices")
sys.exit(1 if bad or acc_a != acc_b else 0)
PYEOF
finish
