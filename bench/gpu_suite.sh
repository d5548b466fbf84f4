#!/usr/bin/env bash
# bench/gpu_suite.sh PART... -- the GPU tests and benchmarks of the open issues, in parts that fit the
# lent machine's 10-minute calls. Run from the checkout root on the GPU machine after
# `source .dev/setup.sh`; builds into BUILD (default build-gpu) when it is missing or stale. Logs go to
# $OUT/<part>/ (default ./gpu-out); every part appends PASS/FAIL/rc rows to $OUT/summary.txt; at the
# end the logs are packed into $OUT/logs.tgz (the device tool brings back few files).
#
# Parts (2 GPUs: the two "lanes" of a part run side by side, one per GPU):
#   tests1   tests/gpu single-GPU tests (op parity, engine step, HF fixtures, demo, int8 / fp8 KV, KV offload, FP8,
#            model families, MoE, INT4, the memory plan, n > 1 forks);
#            sits-bench-controls (a step's sampling controls + logprobs: device ops vs the host path)
#   tests2   tests/gpu two-GPU tests (NCCL, custom all-reduce, KV migration / disaggregation, PP micro-batches)
#            + greedy tokens GPU TP=1 == HF == TP=2
#   decode   8B-shaped decode/prefill table beside the floor and HF transformers (bench/run_decode.sh)
#   fp8      8B decode ms/step and prefill for --quant bf16 | ffn=fp8 | fp8; FP8 accuracy (8B dummy, demo);
#            offline throughput 2048/128 and 128/2048 (bf16, fp8)
#   kv       INT8 KV accuracy (8B dummy + fixtures), 8B decode at context 2048 with bf16 vs int8 KV
#   kvlink   the KV codec table with the GPU links measured (pinned host <-> GPU, GPU 0 -> GPU 1)
#   serving  issue 10's three serving experiments with the 8B-shaped model (bench/experiments_cpu.sh --device cuda)
#            (SERVING_RATES, SERVING_DURATION, SERVING_OVERLOAD; SERVING_ONLY=1,2,3 picks experiments)
#   tp70b    70B-shaped TP=2: custom all-reduce vs NCCL only, batch 1/16/32, context 128/2048
#   layouts  8B served as --tp 2 / --pp 2 (+ micro-batches) / --dp 2 at concurrency 1 and 32
#   scale    the scheduler at scale: 8B-shaped server at --max-num-seqs 1024 with SCALE_REQUESTS (4096)
#            streamed requests (bench/sched_scale.sh: host share of a step); TensorRT-LLM's table rows
#            TRT_ROWS at TRT_SCALE of their request counts (bench/trtllm_table.sh, FP8)
#   grammar  a constrained batch of 32 (JSON schema, a shared counted regex, 32 regexes) vs an unconstrained
#            one, 8B-shaped bf16, Llama-3 tokenizer (bench/grammar_step.sh: mean step ms, mask host time)
#   int4     W4A16 (--quant int4, dummy INT4 weights, group 128): the 8B / 70B linears alone, as run and with
#            INT4_W4_COMPARE (sits-bench-w4 --compare-env; default SITS_W4_PG_MAX_N=2, 1-2 tokens on the persistent GEMV (off by default); INT4_W4_TOKENS); 8B decode batch 1/8/32/64 at context 128 and
#            prefill 1x2048, 70B on one GPU at context 2048, beside the floor; offline 128/2048 8B (issue 25)
#   attn     8B FP8 decode at context 2048, batch 64-512, bf16 / fp8 KV; batch 384-1024 at context 128 (graph
#            buckets); profile_decode.sh at batch 256 and one decode-attention launch under Nsight Compute (issue 22)
#   prefill  8B FP8 prefill of PREFILL_TOKENS (8192): ms, the kernel table of one prefill, the FP8 GEMM plan log (issue 22)
#   moe      Qwen3-30B-A3B shape: decode batch 1/32/256 (bf16 with device routing and with host routing, ffn=fp8, ffn=int4 experts) beside the active-parameter
#            floor; offline 128/2048 and 2048/128 with FP8 experts (issue 24)
#   moefuse  the one-token fused MoE kernels (the default; SITS_MOE_FUSE=0: the separate ops): op parity (fused == the
#            separate ops byte for byte) and moe_cuda.sh, then batch 1 A/B separate vs fused (Qwen3-30B-A3B, gpt-oss-20b;
#            bench/env_ab.py) and a kernel profile of a 4-layer Qwen3-30B-A3B copy with them (issue 24)
#   moegrouped  [moe grouped] the grouped expert GEMMs: op parity (moe cases) and moe_cuda.sh, then A/B of the device
#            path's kernels (SITS_MOE_DEV_GROUPED_MIN, MOEG_BATCH) and of the host path's prefill (SITS_MOE_GROUPED,
#            MOEG_PREFILL) on the Qwen3-30B-A3B shape (issue 24)
#   trt      TensorRT-LLM's table rows only (TRT_SHAPE, TRT_ROWS, TRT_SCALE, TRT_SEQS)
#   gptfast  8B bf16 decode at batch 1 beside gpt-fast's compiled step, both of its SDPA choices (bench/run_decode.sh
#            --peer gpt-fast; GPT_FAST_DIR: a gpt-fast checkout carried to the machine; GPTFAST_CONTEXTS, 128,2048; issue 23)
#   lanes:A,B  run part list A on GPU 0 and B on GPU 1 at once (e.g. lanes:tests1,serving:decode,fp8)
set -uo pipefail
top=$PWD
out=${OUT:-$PWD/gpu-out}
build=${BUILD:-$top/build-gpu}
mkdir -p "$out"
summary=$out/summary.txt
touch "$summary"
row() { printf '%-52s %s\n' "$1" "$2" | tee -a "$summary"; }
# the device tool's copy may carry an older .git than the tree it ships: pass SITS_COMMIT=<sha> from here;
# the build key adds a hash of the tree's difference from that .git's HEAD, so changed sources rebuild
commit=${SITS_COMMIT:-$(cat .snap/rev 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
dirty=$( { git diff HEAD 2>/dev/null; git ls-files --others --exclude-standard 2>/dev/null | xargs -r cat 2>/dev/null; } | md5sum | cut -c1-8)
export SITS_COMMIT=$commit

if [ ! -x "$build/sits-dist" ] || [ "$(cat "$build/.rev" 2>/dev/null)" != "$commit $dirty" ]; then
  t0=$(date +%s)
  autoreconf -fi > /dev/null 2>&1
  mkdir -p "$build"
  (cd "$build" && { [ -f Makefile ] || "$top/configure" -q > "$out/configure.log" 2>&1; } &&
     make -j"$(nproc)" > "$out/make.log" 2>&1 && make -j"$(nproc)" check TESTS= >> "$out/make.log" 2>&1) \
    || { row build FAIL; tail -40 "$out/make.log"; exit 1; }
  echo "$commit $dirty" > "$build/.rev"
  row "build ($commit)" "ok ($(( $(date +%s) - t0 )) s)"
fi
export top_srcdir=$top top_builddir=$build PYTHON=python3 MPIRUN=mpirun
B=$build

gtest() { # NAME CMD...: one test, PASS/SKIP/FAIL row
  local name=$1; shift
  local log=$out/tests/$(echo "$name" | tr '/ ' '__').log
  mkdir -p "$out/tests"
  local t0=$(date +%s)
  timeout 600 "$@" > "$log" 2>&1; local rc=$?
  case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL ($rc)" ;; esac
  row "$name" "$r ($(( $(date +%s) - t0 )) s)"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -15 "$log" | sed 's/^/    /'
  return 0
}

part_tests1() {   # TESTS1_ONLY="name ..." runs just those (binaries or .sh names without the suffix)
  local want=" ${TESTS1_ONLY:-} "
  for t in test_op_parity test_engine_step test_fp8_parity; do
    [ -n "${TESTS1_ONLY:-}" ] && [[ $want != *" $t "* ]] && continue
    [ -x "$B/tests/gpu/$t" ] && gtest "tests/gpu/$t" "$B/tests/gpu/$t"
  done
  for t in fixtures_cuda prefill_kernels_cuda demo_cuda kv_int8_cuda kv_fp8_cuda kv_offload_cuda fp8_cuda families_cuda moe_cuda int4_cuda n_fork_cuda dummy_cuda spec_cuda \
           memory_plan_cuda; do
    [ -n "${TESTS1_ONLY:-}" ] && [[ $want != *" $t "* ]] && continue
    [ -f "$top/tests/gpu/$t.sh" ] && gtest "tests/gpu/$t.sh" bash "$top/tests/gpu/$t.sh"
  done
  [ -n "${TESTS1_ONLY:-}" ] && [[ $want != *" sits-bench-controls "* ]] && return 0
  [ -x "$B/bench/sits-bench-controls" ] && gtest "bench/sits-bench-controls (cuda, table in its log)" \
    "$B/bench/sits-bench-controls" --device cuda --json "$out/tests/bench_controls.json"
}

part_tests2() {
  [ -n "${TESTS2_OP_PARITY:-}" ] && gtest "tests/gpu/test_op_parity" "$B/tests/gpu/test_op_parity"
  [ -n "${TESTS2_FIXTURES:-}" ] && gtest "tests/gpu/fixtures_cuda.sh" bash "$top/tests/gpu/fixtures_cuda.sh"
  for t in nccl_tp2 custom_ar_tp2 ${TESTS2_EXTRA:-} kv_offload_cuda kv_migrate_cuda pp_mb_cuda; do
    [ -f "$top/tests/gpu/$t.sh" ] && gtest "tests/gpu/$t.sh" bash "$top/tests/gpu/$t.sh"
  done
  local m=$top/tests/fixtures/models/llama_small
  local ids want g1 g2
  ids=$(awk 'index($0, "\"prompts\": [") {on=1; n=-1; next} on {n++; if (n==3) {gsub(/[][ ]/,""); sub(/,$/,""); print; exit}}' "$m/reference.json")
  want=$(awk 'index($0, "\"greedy\": [") {on=1; n=-1; next} on {n++; if (n==3) {gsub(/[][ ]/,""); sub(/,$/,""); print; exit}}' "$m/reference.json")
  g1=$(CUDA_VISIBLE_DEVICES=0 "$B/sits-dist" --model "$m" --device cuda --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2> "$out/tests/tp1.err")
  # informative only: 16 free-running bf16 tokens of a high-gain random fixture can flip at a near tie
  # (the teacher-forced fixtures_cuda.sh is the test); TP 2 == TP 1 below is the check
  row "llama_small greedy 16 tokens, GPU TP=1 vs HF (info)" "$([ "$g1" = "$want" ] && echo same || echo "differs: $g1 vs $want")"
  g2=$(mpirun -np 2 "$B/sits-dist" --model "$m" --device cuda --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2> "$out/tests/tp2.err")
  row "llama_small greedy, GPU TP=2 == TP=1" "$([ "$g2" = "$g1" ] && echo yes || echo "NO: $g2")"
}

part_decode() {
  bash "$top/bench/run_decode.sh" --build "$B" --out "$out/decode" --model "$top/bench/configs/llama3-8b" --device cuda \
    --batch 1,8,32,64 --context 128,2048 --prefill 2048 --iters 20 --sits-args "--load-format dummy" > "$out/decode.log" 2>&1
  row "bench/run_decode.sh 8B" "rc $?"
  [ -f "$out/decode/decode.md" ] && cat "$out/decode/decode.md"
}

part_fp8() {
  mkdir -p "$out/fp8"
  for q in bf16 ffn=fp8 fp8; do
    "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --batch 1,32 \
      --context 128 --prefill 2048 --iters 20 --quant "$q" --json "$out/fp8/decode-$q.json" > "$out/fp8/decode-$q.log" 2>&1
    row "decode --quant $q" "rc $?"
    grep -E '^(decode|prefill)' "$out/fp8/decode-$q.log" | sed 's/^/    /'
  done
  # the same all-fp8 model with the activation quantisation as a kernel of its own (before the fusion)
  "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --batch 1,32 \
    --context 128 --prefill 2048 --iters 20 --quant fp8 --fp8-fused-quant 0 --json "$out/fp8/decode-fp8-sepq.json" > "$out/fp8/decode-fp8-sepq.log" 2>&1
  row "decode --quant fp8 --fp8-fused-quant 0" "rc $?"
  grep -E '^(decode|prefill)' "$out/fp8/decode-fp8-sepq.log" | sed 's/^/    /'
  "$B/bench/sits-fp8-accuracy" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda \
    --policies "bf16;ffn=fp8;fp8" --prompts 4 --len 128 --json "$out/fp8/acc-8b.json" > "$out/fp8/acc-8b.log" 2>&1
  row "fp8 accuracy 8B dummy" "rc $?"; tail -6 "$out/fp8/acc-8b.log" | sed 's/^/    /'
  "$B/bench/sits-fp8-accuracy" --model "$top/models/demo" --device cuda --json "$out/fp8/acc-demo.json" > "$out/fp8/acc-demo.log" 2>&1
  row "fp8 accuracy demo" "rc $?"; tail -6 "$out/fp8/acc-demo.log" | sed 's/^/    /'
  for q in ${OFFLINE_QUANTS:-fp8}; do
    "$B/bench/sits-bench-offline" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant "$q" --input 2048 --output 128 \
      --requests 512 --max-num-seqs 256 --max-num-batched-tokens 8192 --json "$out/fp8/off-2048-128-$q.json" > "$out/fp8/off-2048-128-$q.log" 2>&1
    row "offline 2048/128 --quant $q" "rc $?"; tail -3 "$out/fp8/off-2048-128-$q.log" | sed 's/^/    /'
    "$B/bench/sits-bench-offline" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant "$q" --input 128 --output 2048 \
      --requests 256 --max-num-seqs 256 --max-num-batched-tokens 8192 --json "$out/fp8/off-128-2048-$q.json" > "$out/fp8/off-128-2048-$q.log" 2>&1
    row "offline 128/2048 --quant $q" "rc $?"; tail -3 "$out/fp8/off-128-2048-$q.log" | sed 's/^/    /'
  done
}

part_kv() {
  mkdir -p "$out/kv"
  local fx=$top/tests/fixtures/models
  "$B/bench/sits-kv-int8-accuracy" --device cuda --refs bf16 --model "$fx/llama3" --model "$fx/qwen2" --model "$fx/mistral_sharded" \
    --model "$fx/llama_small" --dummy-model "$top/bench/configs/llama3-8b" --prompts 8 --len 512 --json "$out/kv/int8-acc.json" \
    > "$out/kv/int8-acc.log" 2>&1
  row "int8 KV accuracy (fixtures + 8B dummy, vs bf16 KV)" "rc $?"; tail -14 "$out/kv/int8-acc.log" | sed 's/^/    /'
  for kd in auto int8; do
    "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --batch 1,32,64 \
      --context 2048 --prefill 0 --iters 20 --kv-cache-dtype $kd --json "$out/kv/decode-kv-$kd.json" > "$out/kv/decode-kv-$kd.log" 2>&1
    row "decode 8B ctx 2048 --kv-cache-dtype $kd" "rc $?"; grep -E '^decode' "$out/kv/decode-kv-$kd.log" | sed 's/^/    /'
  done
}

part_kvlink() { # both GPUs visible: the peer link is measured too
  mkdir -p "$out/kv"
  "$B/bench/sits-bench-kv-codec" --json "$out/kv/codec.json" > "$out/kv/codec.log" 2>&1
  row "kv codec / link table" "rc $?"; grep -E '^(#|links|int8|fp32|bf16)' "$out/kv/codec.log" | head -30 | sed 's/^/    /'
}

part_serving() {
  bash "$top/bench/experiments_cpu.sh" --build "$B" --out "$out/serving" --config "$top/bench/configs/llama3-8b" --np 1 \
    --device cuda --rates "${SERVING_RATES:-30 60 120}" --duration "${SERVING_DURATION:-8}" --target-tpot-ms 30 \
    --slo-ttft-ms 1000 --slo-tpot-ms 40 --overload-rate "${SERVING_OVERLOAD:-150}" --prompt-len uniform:128:512 \
    --output-len fixed:64 --prefix-requests 32 --prefix-concurrency 8 --only "${SERVING_ONLY:-1,2,3}" > "$out/serving.log" 2>&1
  row "serving experiments (8B, 1 GPU)" "rc $?"
  [ -f "$out/serving/results.md" ] && cat "$out/serving/results.md"
}

part_tp70b() {
  mkdir -p "$out/tp70b"
  for car in ${TP70B_CAR:-1 0}; do
    mpirun -np 2 --bind-to none "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-70b" --load-format dummy \
      --device cuda --batch 1,16,32 --context 128,2048 --prefill 0 --iters 10 --warmup 2 --custom-allreduce $car \
      --json "$out/tp70b/car$car.json" > "$out/tp70b/car$car.log" 2>&1
    row "70B TP2 custom-allreduce=$car" "rc $?"
    grep -E '^(decode|gpu memory|floor)' "$out/tp70b/car$car.log" | sed 's/^/    /'
  done
}

part_layouts() {
  bash "$top/bench/run_layouts.sh" --build "$B" --out "$out/layouts" --np 2 --device cuda \
    --requests-per-conc "${LAYOUT_REQS:-1:8 32:128}" > "$out/layouts.log" 2>&1
  row "layouts 8B (tp/pp/dp 2)" "rc $?"
  tail -12 "$out/layouts.log"
}

part_grammar() {   # [structured output] issue 21's budget: a constrained batch of 32 vs an unconstrained one
  mkdir -p "$out/grammar/m"
  cp "$top/bench/configs/llama3-8b/config.json" "$out/grammar/m/"
  xz -dc "$top/tests/fixtures/tokenizers/real/llama-bpe.json.xz" > "$out/grammar/m/tokenizer.json"
  (cd "$B" && OUT_JSON="$out/grammar/grammar-step.json" bash "$top/bench/grammar_step.sh" "$out/grammar/m" 32 "${GRAMMAR_TOKENS:-128}" \
     --device cuda > "$out/grammar/grammar-step.log" 2>&1)
  row "grammar_step 8B bf16 batch 32" "rc $?"; tail -6 "$out/grammar/grammar-step.log" | sed 's/^/    /'
  rm -f "$out/grammar/m/tokenizer.json"
}

part_int4() {   # [int4] issue 25's benchmarks
  mkdir -p "$out/int4"
  for sh in 8b 70b; do   # the linears alone, as run and with INT4_W4_COMPARE set, beside the copy floor
    "$B/bench/sits-bench-w4" --device cuda --shapes $sh --tokens "${INT4_W4_TOKENS:-1,2,8,32}" --compare \
      --compare-env "${INT4_W4_COMPARE:-SITS_W4_PG_MAX_N=2}" --json "$out/int4/w4-$sh.json" > "$out/int4/w4-$sh.log" 2>&1
    row "int4 linears $sh (sits-bench-w4 --compare-env ${INT4_W4_COMPARE:-SITS_W4_PG_MAX_N=2})" "rc $?"; sed -n '/^linear/,$p' "$out/int4/w4-$sh.log" | sed 's/^/    /'
  done
  "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --batch "${INT4_BATCH:-1,8,32,64}" \
    --context 128 --prefill "${INT4_PREFILL:-2048}" --iters 20 --quant int4 --json "$out/int4/decode-8b.json" > "$out/int4/decode-8b.log" 2>&1
  row "int4 decode 8B" "rc $?"; grep -E '^(decode|prefill|copy|device)' "$out/int4/decode-8b.log" | sed 's/^/    /'
  "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-70b" --load-format dummy --device cuda --batch "${INT4_BATCH:-1,8,32,64}" \
    --context 2048 --fill none --prefill "${INT4_PREFILL:-2048}" --iters 10 --quant int4 --json "$out/int4/decode-70b.json" > "$out/int4/decode-70b.log" 2>&1
  row "int4 decode 70B (one GPU)" "rc $?"; grep -E '^(decode|prefill|copy|device)' "$out/int4/decode-70b.log" | sed 's/^/    /'
  [ "${INT4_OFFLINE:-1}" = 1 ] || return 0
  "$B/bench/sits-bench-offline" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant int4 --input 128 \
    --output 2048 --requests 256 --max-num-seqs 256 --max-num-batched-tokens 8192 --json "$out/int4/off-128-2048.json" \
    > "$out/int4/off-128-2048.log" 2>&1
  row "int4 offline 128/2048 8B" "rc $?"; tail -2 "$out/int4/off-128-2048.log" | sed 's/^/    /'
}
part_scale() {
  mkdir -p "$out/scale"
  B=$B bash "$top/bench/sched_scale.sh" --config "$top/bench/configs/llama3-8b" --seqs 1024 \
    --requests "${SCALE_REQUESTS:-4096}" --prompt 128 --output "${SCALE_OUTPUT:-256}" --out "$out/scale" \
    -- --device cuda --quant fp8 > "$out/scale/sched.log" 2>&1
  row "sched_scale 8B fp8 1024 seqs" "rc $?"; tail -9 "$out/scale/sched.log" | sed 's/^/    /'
  B=$B bash "$top/bench/trtllm_table.sh" --shape 8b --quant fp8 --scale "${TRT_SCALE:-0.1}" \
    --rows "${TRT_ROWS:-128/2048,2048/128}" --max-num-seqs "${TRT_SEQS:-512}" --out "$out/scale" > "$out/scale/trt.log" 2>&1
  row "trtllm_table 8B fp8" "rc $?"; sed 's/^/    /' "$out/scale/trt.log"
}

part_attn() {   # [large-batch decode] issue 22: 8B FP8 decode at batch ATTN_BATCH, context 2048, bf16 / fp8 KV;
                #  the decode attention kernel's share of a step and one launch under Nsight Compute
  mkdir -p "$out/attn"
  for kd in ${ATTN_KV:-bf16 fp8}; do
    local bs=64,256; [ $kd = bf16 ] || bs=64,256,512   # 512 x 2048 tokens of bf16 KV do not fit
    "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant fp8 \
      --batch "${ATTN_BATCH:-$bs}" --context "${ATTN_CTX:-2048}" --fill none --prefill 0 --iters 10 --warmup 3 --kv-cache-dtype $kd \
      --json "$out/attn/decode-$kd.json" > "$out/attn/decode-$kd.log" 2>&1
    row "decode 8B fp8 ctx ${ATTN_CTX:-2048} kv $kd" "rc $?"; grep -E '^(decode|floor|device|copy)' "$out/attn/decode-$kd.log" | sed 's/^/    /'
  done
  # CUDA graph buckets above 256 (context 128, fp8 KV)
  "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant fp8 \
    --batch "${ATTN_BIG:-384,512,1024}" --context 128 --fill none --prefill 0 --iters 10 --warmup 3 --kv-cache-dtype fp8 \
    --json "$out/attn/decode-big.json" > "$out/attn/decode-big.log" 2>&1
  row "decode 8B fp8 ctx 128 batch 384/512/1024 (graphs)" "rc $?"; grep -E '^(decode|graph)' "$out/attn/decode-big.log" | sed 's/^/    /'
  [ "${ATTN_PROF:-1}" = 1 ] || return 0
  local NCU; NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$NCU" ] || { row "ncu" "missing"; return 0; }
  for kd in ${ATTN_PROF_KV:-fp8}; do
    bash "$top/bench/profile_decode.sh" "$B" "$out/attn/prof-$kd" --batch "${ATTN_PROF_BATCH:-256}" --context 2048 \
      --quant fp8 --kv-cache-dtype $kd > "$out/attn/prof-$kd.log" 2>&1
    row "profile_decode 8B fp8 b${ATTN_PROF_BATCH:-256} ctx 2048 kv $kd" "rc $?"; head -14 "$out/attn/prof-$kd/profile.txt" | sed 's/^/    /'
    [ "${ATTN_NCU:-1}" = 1 ] || continue
    "$NCU" --clock-control none --graph-profiling node -k regex:att_decode --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" \
      --load-format dummy --device cuda --quant fp8 --batch "${ATTN_PROF_BATCH:-256}" --context 2048 --fill none --prefill 0 \
      --iters 2 --warmup 1 --kv-cache-dtype $kd > "$out/attn/ncu-$kd.txt" 2>&1
    row "ncu att_decode kv $kd" "rc $?"
    grep -E 'DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Grid Size|Stall|No Eligible|Issued Warp|L2 Hit|Mem Busy|Max Bandwidth' \
      "$out/attn/ncu-$kd.txt" | head -40 | sed 's/^/    /'
  done
}

part_prefill() {   # [fp8 prefill] issue 22: where an FP8 prefill step's time goes (1 x PREFILL_TOKENS), and whether
                   # cuBLASLt offers outer-vector-scaled FP8 GEMMs for the shapes (log lines of the fallback)
  mkdir -p "$out/prefill"
  local n=${PREFILL_TOKENS:-8192}
  SITS_LOG_LEVEL=debug "$B/bench/sits-bench-decode" --model "$top/bench/configs/llama3-8b" --load-format dummy --device cuda --quant fp8 \
    --batch 1 --context 128 --fill none --prefill "$n" --iters 5 --kv-cache-dtype fp8 \
    --json "$out/prefill/prefill.json" > "$out/prefill/prefill.log" 2>&1
  row "prefill 8B fp8 1 x $n" "rc $?"; grep -E '^prefill|outer|fp8 gemm' "$out/prefill/prefill.log" | sort | uniq -c | head -20 | sed 's/^/    /'
  PICK=prefill bash "$top/bench/profile_decode.sh" "$B" "$out/prefill/prof" --quant fp8 --kv-cache-dtype fp8 --prefill "$n" \
    --iters 2 > "$out/prefill/prof.log" 2>&1
  row "profile prefill 8B fp8 1 x $n" "rc $?"; head -16 "$out/prefill/prof/profile.txt" | sed 's/^/    /'
}

part_moe() {   # [moe] issue 24's benchmarks: the Qwen3-30B-A3B shape (dummy weights) on one GPU: decode at batch 1/32/256
               # beside the active-parameter floor for bf16 / ffn=fp8 / ffn=int4 experts; offline 128/2048 and 2048/128 (fp8)
  mkdir -p "$out/moe"
  local m=$top/bench/configs/qwen3-30b-a3b
  # bf16/host: the same bf16 experts with host routing for every step (a GEMM pair per expert, no graphs): what
  # the device routing (steps of up to 256 tokens) gains
  for q in ${MOE_QUANTS:-bf16 bf16/host ffn=fp8 ffn=int4}; do
    local dm=0 f=${q//\//-}
    [ "${q#*/}" = host ] && dm=-1
    "$B/bench/sits-bench-decode" --model "$m" --load-format dummy --device cuda --batch "${MOE_BATCH:-1,32,256}" --context 128,2048 \
      --fill none --prefill 2048 --iters 10 --warmup 2 --quant "${q%/host}" --kv-cache-dtype fp8 --moe-device-max-tokens $dm \
      --json "$out/moe/decode-$f.json" > "$out/moe/decode-$f.log" 2>&1
    row "moe decode 30B-A3B --quant $q" "rc $?"; grep -E '^(decode|prefill|mixture)' "$out/moe/decode-$f.log" | sed 's/^/    /'
  done
  [ "${MOE_OFFLINE:-1}" = 1 ] || return 0
  for io in 128:2048 2048:128; do
    "$B/bench/sits-bench-offline" --model "$m" --load-format dummy --device cuda --quant ffn=fp8 --kv-cache-dtype fp8 \
      --input "${io%%:*}" --output "${io##*:}" --requests "${MOE_REQUESTS:-512}" --max-num-seqs 256 --max-num-batched-tokens 8192 \
      --json "$out/moe/off-${io/:/-}.json" > "$out/moe/off-${io/:/-}.log" 2>&1
    row "moe offline 30B-A3B ffn=fp8 ${io/:/\/}" "rc $?"; tail -2 "$out/moe/off-${io/:/-}.log" | sed 's/^/    /'
  done
}

part_moefuse() {   # [moe fuse] issue 24: see the parts list above (about 7 minutes on one H200)
  mkdir -p "$out/moefuse"
  ( export OP_PARITY_ONLY=moe TESTS1_ONLY="test_op_parity moe_cuda"; part_tests1 )
  grep -hE "fused|FAIL" "$out"/tests/*op_parity*.log 2>/dev/null | head -12 | sed 's/^/    /'
  for m in qwen3-30b-a3b gpt-oss-20b; do
    timeout 200 python3 "$top/bench/env_ab.py" --bench "$B/bench/sits-bench-decode" --reps 2 --out "$out/moefuse/ab-$m" \
      --json "$out/moefuse/ab-$m.json" --variant "sep:SITS_MOE_FUSE=0" --variant "fuse:SITS_MOE_FUSE=1" -- \
      --model "$top/bench/configs/$m" --load-format dummy --device cuda --fill none --batch 1 --context 128,2048 --iters 20 \
      --warmup 3 --kv-cache-dtype fp8 > "$out/moefuse/ab-$m.log" 2>&1
    row "moe fuse A/B $m batch 1" "rc $?"; tail -6 "$out/moefuse/ab-$m.log" | sed 's/^/    /'
  done
  local m4=$out/moefuse/q3moe4   # the profile reads 4 layers (the kernels of one layer repeat)
  mkdir -p "$m4" && python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 4
json.dump(c, open(sys.argv[2], "w"), indent=1)' "$top/bench/configs/qwen3-30b-a3b/config.json" "$m4/config.json"
  SITS_MOE_FUSE=1 timeout 150 bash "$top/bench/profile_decode.sh" "$B" "$out/moefuse/prof" --model "$m4" --kv-cache-dtype fp8 \
    > "$out/moefuse/prof.txt" 2>&1
  row "moe fuse profile 4-layer 30B-A3B batch 1" "rc $?"; grep -v '^==PROF==' "$out/moefuse/prof.txt" | tail -24 | sed 's/^/    /'
}

part_moegrouped() {   # [moe grouped] issue 24: see the parts list above (about 5 minutes on one H100)
  mkdir -p "$out/moegrouped"
  ( export OP_PARITY_ONLY=moe TESTS1_ONLY="test_op_parity moe_cuda"; part_tests1 )
  grep -hE "grouped|FAIL" "$out"/tests/*op_parity*.log 2>/dev/null | head -12 | sed 's/^/    /'
  local m=$top/bench/configs/qwen3-30b-a3b
  # the device path's steps: the GEMV / MMA kernels (MIN past every batch) against the grouped kernels from 2 tokens
  timeout 240 python3 "$top/bench/env_ab.py" --bench "$B/bench/sits-bench-decode" --reps 1 --out "$out/moegrouped/dev" \
    --json "$out/moegrouped/dev.json" --variant "gemv:SITS_MOE_DEV_GROUPED_MIN=100000" --variant "grouped:SITS_MOE_DEV_GROUPED_MIN=2" -- \
    --model "$m" --load-format dummy --device cuda --fill none --prefill 0 --batch "${MOEG_BATCH:-8,16,32,48,64,96,128,256}" \
    --context 128 --iters 10 --warmup 3 > "$out/moegrouped/dev.log" 2>&1
  row "moe grouped A/B device path (30B-A3B)" "rc $?"; grep '^decode' "$out/moegrouped/dev.log" | sed 's/^/    /'
  # host-routed prefill: a GEMM pair per expert against the grouped GEMMs
  timeout 200 python3 "$top/bench/env_ab.py" --bench "$B/bench/sits-bench-decode" --reps 1 --out "$out/moegrouped/pf" \
    --json "$out/moegrouped/pf.json" --variant "per-expert:SITS_MOE_GROUPED=0" --variant "grouped:SITS_MOE_GROUPED=1" -- \
    --model "$m" --load-format dummy --device cuda --fill none --batch 1 --context 128 --iters 3 --warmup 1 \
    --prefill "${MOEG_PREFILL:-2048}" > "$out/moegrouped/pf.log" 2>&1
  row "moe grouped A/B prefill (30B-A3B)" "rc $?"; grep '^prefill' "$out/moegrouped/pf.log" | sed 's/^/    /'
}

part_trt() {   # TensorRT-LLM's table rows only (part scale without sched_scale)
  mkdir -p "$out/scale"
  B=$B bash "$top/bench/trtllm_table.sh" --shape "${TRT_SHAPE:-8b}" --quant fp8 --scale "${TRT_SCALE:-0.1}" \
    --rows "${TRT_ROWS:-128/2048,2048/128}" --max-num-seqs "${TRT_SEQS:-512}" --out "$out/scale" > "$out/scale/trt.log" 2>&1
  row "trtllm_table ${TRT_SHAPE:-8b} fp8" "rc $?"; sed 's/^/    /' "$out/scale/trt.log"
}

part_gptfast() {   # [issue 23] sits-dist bf16 batch 1 and gpt-fast in one call, gpt-fast with generate.py's math SDPA and with
                   # PyTorch's choice (compare with the better); each context compiles gpt-fast afresh (a minute or two)
  [ -f "${GPT_FAST_DIR:-}/model.py" ] || { row "gpt-fast peer" "SKIP (GPT_FAST_DIR: a gpt-fast checkout with model.py)"; return 0; }
  for sdpa in math default; do
    TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor} bash "$top/bench/run_decode.sh" --build "$B" \
      --out "$out/gptfast-$sdpa" --peer gpt-fast --gpt-fast "$GPT_FAST_DIR" --hf-args "--sdpa $sdpa" \
      --model "$top/bench/configs/llama3-8b" --device cuda --batch 1 --context "${GPTFAST_CONTEXTS:-128,2048}" --prefill 0 \
      --iters 50 --warmup 10 --sits-args "--load-format dummy" > "$out/gptfast-$sdpa.log" 2>&1
    row "run_decode.sh --peer gpt-fast (SDPA $sdpa)" "rc $?"
    sed -n '/^| kind/,/^$/p' "$out/gptfast-$sdpa/decode.md" 2>/dev/null | sed 's/^/    /'
    grep -h "gpt-fast / sits-dist" "$out/gptfast-$sdpa/decode.md" 2>/dev/null | sed 's/^/    /'
  done
}

part_offprof() {   # [issue 22] where an offline row's GPU time goes, by kernel class (bench/profile_offline.sh, ncu):
                   # OFFPROF_ROW (default 2048/128), OFFPROF_REQUESTS at --max-num-seqs OFFPROF_SEQS (1024, 512), FP8
                   # weights + KV, 8192 tokens a step; only OFFPROF_STEPS are profiled (default prompt:2@200: two
                   # mixed steps of the steady state, kernel by kernel; decode:2@1000 OFFPROF_GRAPHS=node for 128/2048)
  mkdir -p "$out/offprof"
  local r=${OFFPROF_ROW:-2048/128}
  OFFPROF_STEPS=${OFFPROF_STEPS:-prompt:2@200} bash "$top/bench/profile_offline.sh" "$B" "$out/offprof" --quant fp8 \
    --kv-cache-dtype fp8 --input "${r%/*}" --output "${r#*/}" --requests "${OFFPROF_REQUESTS:-1024}" \
    --max-num-seqs "${OFFPROF_SEQS:-512}" --max-num-batched-tokens 8192 > "$out/offprof/log.txt" 2>&1
  row "profile offline $r 8B fp8" "rc $?"; head -32 "$out/offprof/log.txt" | sed 's/^/    /'
}

run_parts() { for p in "$@"; do echo "=== part $p ($(date +%T))"; "part_$p"; done; }

for arg in "$@"; do
  case $arg in
    lanes:*)
      spec=${arg#lanes:}; a=${spec%%:*}; b=${spec#*:}
      ( export CUDA_VISIBLE_DEVICES=0; run_parts ${a//,/ } ) > "$out/lane0.log" 2>&1 &
      p0=$!
      ( export CUDA_VISIBLE_DEVICES=1; run_parts ${b//,/ } ) > "$out/lane1.log" 2>&1 &
      p1=$!
      wait $p0 $p1
      grep -h -E '^(    |\| |kind|decode|prefill|layout)' "$out/lane0.log" "$out/lane1.log" | head -150
      ;;
    *) run_parts "$arg" ;;
  esac
done
tar czf "$out/logs.tgz" -C "$out" --exclude=logs.tgz . 2>/dev/null
# the device tool brings back few files: keep the archive and the summary only
find "$out" -mindepth 1 -maxdepth 1 ! -name logs.tgz ! -name summary.txt -exec rm -rf {} +
echo; echo "=== summary"; cat "$summary"
