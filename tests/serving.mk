# tests/serving.mk -- serving that loses nothing (issue 20), included by Makefile.am:
#   tests/integration/lifecycle.sh   Slurm-style SIGTERM with N requests in flight: 503 at once, every
#                                    client gets its whole response, exit 0; --shutdown-timeout expiry
#                                    (finish "abort", never a cut stream); a second signal stops at once
#   tests/integration/conn_flood.sh  5,000 idle + 100 slow-body connections: /health and a completion
#                                    within 1 s, idle connections kept, per-client limit answers 503
#   tests/integration/cpu_side.sh    CPU threads from the binding shared among ranks, KV sized by need
#                                    (capped), the per-step overhead of a tiny model
#   tests/integration/stream_admission.sh  256 streams at once: all admitted before the first ends, /metrics
#                                    answers throughout (the pump hands its lock to waiting HTTP threads)
#   tests/gpu/memory_plan_cuda.sh    the 8B shape at --max-num-seqs 1024 (bf16, fp8) on one GPU: plan logged, a
#                                    burst served, no device allocation after start-up; refusal before
#                                    loading; the largest --max-num-seqs that starts (skips without a GPU)
# lifecycle and conn_flood use tests/integration/serve_client.py (python3, loopback only, bounded).
TESTS += tests/integration/lifecycle.sh tests/integration/conn_flood.sh tests/integration/cpu_side.sh \
	tests/integration/stream_admission.sh \
	tests/gpu/memory_plan_cuda.sh
EXTRA_DIST += tests/integration/lifecycle.sh tests/integration/conn_flood.sh tests/integration/cpu_side.sh \
	tests/integration/stream_admission.sh \
	tests/integration/serve_client.py tests/gpu/memory_plan_cuda.sh
