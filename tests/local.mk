# tests: integration tests of the whole engine (fixtures from HF, MPI runs); each module's unit
# tests sit in that module's fragment.
check_PROGRAMS += tests/integration/test_fixtures
tests_integration_test_fixtures_SOURCES = tests/integration/test_fixtures.c
TESTS += tests/gpu/fixtures_cuda.sh tests/gpu/demo_cuda.sh tests/integration/serve.sh tests/integration/prefix_cache.sh tests/integration/adaptive_batch.sh tests/integration/tenants.sh tests/integration/pipeline.sh tests/integration/openai_client.sh tests/integration/cli.sh tests/integration/tokenizer_cli.sh tests/integration/faults.sh tests/integration/fixtures_tp1.sh tests/integration/fixtures_tp2.sh tests/integration/fixtures_tp4.sh
EXTRA_DIST += tests/integration/fixtures_tp1.sh tests/integration/fixtures_tp2.sh tests/integration/fixtures_tp4.sh tests/integration/mpi_env.sh tests/integration/lib.sh tests/integration/cli.sh tests/integration/faults.sh tests/integration/tokenizer_cli.sh tests/gpu/fixtures_cuda.sh tests/gpu/demo_cuda.sh \
	tests/integration/serve.sh tests/integration/openai_client.sh tests/integration/prefix_cache.sh tests/integration/adaptive_batch.sh tests/integration/tenants.sh tests/integration/pipeline.sh

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_sample
tests_unit_test_sample_SOURCES = tests/unit/test_sample.c
tests_unit_test_sample_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_sample_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sample tests/integration/sample_tp3.sh
check_PROGRAMS += tests/unit/test_plan
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c
tests_unit_test_plan_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_plan_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_plan
check_PROGRAMS += tests/unit/test_kv_blocks
tests_unit_test_kv_blocks_SOURCES = tests/unit/test_kv_blocks.c
tests_unit_test_kv_blocks_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kv_blocks_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_kv_blocks
check_PROGRAMS += tests/unit/test_comm
tests_unit_test_comm_SOURCES = tests/unit/test_comm.c
tests_unit_test_comm_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_comm_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_comm tests/integration/comm_np3.sh
endif
EXTRA_DIST += tests/integration/comm_np3.sh
EXTRA_DIST += tests/integration/sample_tp3.sh
TESTS += tests/integration/otlp.sh
EXTRA_DIST += tests/integration/otlp.sh
TESTS += tests/integration/pipeline_mb.sh tests/gpu/pp_mb_cuda.sh
EXTRA_DIST += tests/integration/pipeline_mb.sh tests/gpu/pp_mb_cuda.sh
# [int8 kv] --kv-cache-dtype int8: accuracy vs fp32 / bf16 KV on the fixtures (bounds), TP 2 = TP 1, GPU run
TESTS += tests/integration/kv_int8_accuracy.sh tests/integration/kv_int8_tp2.sh tests/gpu/kv_int8_cuda.sh
EXTRA_DIST += tests/integration/kv_int8_accuracy.sh tests/integration/kv_int8_tp2.sh tests/gpu/kv_int8_cuda.sh
# [kv move] KV migration between --dp replicas and --disaggregate prefill -> decode (CPU, mpirun), GPU twin (NCCL)
TESTS += tests/integration/kv_migrate.sh tests/gpu/kv_migrate_cuda.sh
EXTRA_DIST += tests/integration/kv_migrate.sh tests/gpu/kv_migrate_cuda.sh
# [kv move, memory plan] moves through the staging set aside at start-up, in chunks; no allocation after start-up
TESTS += tests/integration/kv_move_alloc.sh
EXTRA_DIST += tests/integration/kv_move_alloc.sh
# [fp8] FP8 checkpoint loading (vs HF on the dequantised weights, TP 1/2/4), fp8 TP sharding, accuracy bounds on CPU.
TESTS += tests/integration/fp8_cpu.sh tests/gpu/fp8_cuda.sh
EXTRA_DIST += tests/integration/fp8_cpu.sh tests/gpu/fp8_cuda.sh
# [fp8 block] block-wise FP8 checkpoints (Qwen3-*-FP8 / DeepSeek-V3 layout): dequantised == HF, re-quantised per row
TESTS += tests/integration/fp8_block.sh
EXTRA_DIST += tests/integration/fp8_block.sh
# [int4] AWQ / GPTQ / compressed-tensors INT4 checkpoints (vs HF on the dequantised weights, TP 1/2), refusals,
# --quant int4 (tests/ref/gen_int4_fixtures.py writes the fixtures)
TESTS += tests/integration/int4.sh tests/gpu/int4_cuda.sh
EXTRA_DIST += tests/integration/int4.sh tests/gpu/int4_cuda.sh
check_PROGRAMS += tests/unit/test_kv_int8
tests_unit_test_kv_int8_SOURCES = tests/unit/test_kv_int8.c
tests_unit_test_kv_int8_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_kv_int8
# [fp8 kv] --kv-cache-dtype fp8 (E4M3): host codes vs torch (committed fixture), cpu kv_write / attention vs an
# independent quantiser, accuracy vs fp32 / bf16 KV on the fixtures and the demo model, TP 2 = TP 1, GPU run
check_PROGRAMS += tests/unit/test_kv_fp8
tests_unit_test_kv_fp8_SOURCES = tests/unit/test_kv_fp8.c
tests_unit_test_kv_fp8_CPPFLAGS = $(AM_CPPFLAGS) -DSITS_KV_FP8_REF='"$(abs_top_srcdir)/tests/unit/data/kv_fp8/e4m3_ref.bin"'
tests_unit_test_kv_fp8_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_kv_fp8 tests/integration/kv_fp8_accuracy.sh tests/integration/kv_fp8_tp2.sh tests/gpu/kv_fp8_cuda.sh \
	tests/integration/kv_offload_fp8.sh tests/integration/prefix_cache_fp8.sh
EXTRA_DIST += tests/unit/data/kv_fp8/e4m3_ref.bin tests/ref/gen_kv_fp8_ref.py tests/integration/kv_fp8_accuracy.sh \
	tests/integration/kv_fp8_tp2.sh tests/gpu/kv_fp8_cuda.sh tests/integration/kv_offload_fp8.sh tests/integration/prefix_cache_fp8.sh
# [real model] issue 19: SmolLM2-135M-Instruct from its GGUF (fetched by launch/quickstart test, skip 77
# without it) answers as HF transformers: greedy ids at TP 1 / 3, --tokenize, served chat text.
TESTS += tests/integration/real_model.sh
EXTRA_DIST += tests/integration/real_model.sh
# [gguf] the same GGUF served on its own: config, tokenizer and chat template from its metadata
TESTS += tests/integration/gguf_standalone.sh
EXTRA_DIST += tests/integration/gguf_standalone.sh tests/integration/real_gguf.sh
# [gguf] sentencepiece and byte-level tokenizers rebuilt from GGUF metadata == transformers' rebuild (tests/ref/gen_gguf_tokenizers.py)
TESTS += tests/integration/gguf_tokenizers.sh
EXTRA_DIST += tests/integration/gguf_tokenizers.sh
# [gguf gemma] [gguf phi3] Gemma 2 and Phi-3 GGUFs alone (config, tokenizer, quantised weights) == transformers
# (tests/ref/gen_gguf_models.py)
TESTS += tests/integration/gguf_models.sh
EXTRA_DIST += tests/integration/gguf_models.sh
# [logprobs] the OpenAI API for real clients (issue 21): logprobs / echo against HF, lm-eval as a client
TESTS += tests/integration/logprobs.sh tests/integration/lm_eval.sh tests/integration/n_fork.sh tests/gpu/n_fork_cuda.sh tests/integration/tool_stream.sh
EXTRA_DIST += tests/integration/n_fork.sh tests/integration/choices.py tests/gpu/n_fork_cuda.sh tests/integration/tool_stream.sh tests/integration/logprobs.sh tests/integration/logprobs_check.py tests/integration/controls_check.py tests/integration/lm_eval.sh \
	tests/ref/gen_logprob_fixtures.py tests/fixtures/logprobs tests/lm_eval
# [sampling controls] [logprobs] the device ops (logit_process, logprob_reduce, logit_pick) and the engine's
# host pieces around them against HF's logits processors, at TP 1, 2 and 4
check_PROGRAMS += tests/unit/test_logit_process
tests_unit_test_logit_process_SOURCES = tests/unit/test_logit_process.c
TESTS += tests/unit/test_logit_process tests/integration/logit_process_tp.sh
EXTRA_DIST += tests/integration/logit_process_tp.sh tests/ref/gen_logit_process_fixture.py

# [families] model families beyond Llama / Mistral / Qwen2 against HF (CPU at TP 1/2/4; one GPU).
TESTS += tests/integration/families.sh tests/gpu/families_cuda.sh
EXTRA_DIST += tests/integration/families.sh tests/gpu/families_cuda.sh
# [gpt-oss] attention sinks, biased experts with the clamped SwiGLU, MXFP4 experts (tests/ref/gen_oai_fixtures.py)
TESTS += tests/integration/gpt_oss.sh
EXTRA_DIST += tests/integration/gpt_oss.sh
# [attention] the tensor-core prefill attention kernels (each forced variant) against HF on the head_dim-128 fixture
TESTS += tests/gpu/prefill_kernels_cuda.sh
EXTRA_DIST += tests/gpu/prefill_kernels_cuda.sh
# [sliding window] KV blocks out of every layer's window go back to the pool: long greedy generations on a
# pool smaller than one sequence == HF (tests/ref/gen_swa_fixture.py), CLI and server at TP 1 / 2, forks,
# prefix cache, swaps, speculation; sits_kv_sliding_window_freed_blocks_total
TESTS += tests/integration/swa_free.sh
EXTRA_DIST += tests/integration/swa_free.sh
# [dummy] --load-format dummy drawn where the weights live (cpu memory, kernels/dummy.cu) = drawn on the host
TESTS += tests/integration/dummy_weights.sh tests/gpu/dummy_cuda.sh
EXTRA_DIST += tests/integration/dummy_weights.sh tests/gpu/dummy_cuda.sh
# [bench] sits-bench-attention on the cpu backend: its rows and JSON accounting against the shapes, its refusals
TESTS += tests/integration/bench_attention.sh tests/integration/bench_w4.sh tests/integration/bench_offline.sh tests/integration/bench_env_ab.sh
EXTRA_DIST += tests/integration/bench_attention.sh tests/integration/bench_w4.sh tests/integration/bench_offline.sh tests/integration/bench_env_ab.sh
# [tool calls] qwen3_coder's XML calls (Qwen3-Coder / Qwen3.5) through the server and the openai client
TESTS += tests/integration/tool_xml.sh
EXTRA_DIST += tests/integration/tool_xml.sh
# [tool calls] Mistral: 9-character call ids back through its template, its markup tokens kept for the parser
TESTS += tests/integration/tool_mistral.sh
EXTRA_DIST += tests/integration/tool_mistral.sh
# [token ids] vLLM's return_token_ids (prompt_token_ids, token_ids) against HF transformers' tokenizer
TESTS += tests/integration/token_ids.sh
EXTRA_DIST += tests/integration/token_ids.sh tests/integration/token_ids_check.py
# [allowed_token_ids, bad_words] vLLM's sampling params against HF transformers' tokenizer and vLLM's rule
TESTS += tests/integration/token_limits.sh
EXTRA_DIST += tests/integration/token_limits.sh tests/integration/token_limits_check.py
# [reasoning] --reasoning-parser deepseek_r1 / qwen3 / auto through the real server and the openai client
TESTS += tests/integration/reasoning.sh
EXTRA_DIST += tests/integration/reasoning.sh tests/integration/reasoning_check.py
# [reasoning] --reasoning-parser openai_gptoss (gpt-oss's harmony) on gpt-oss's template, through the openai client
TESTS += tests/integration/harmony.sh
EXTRA_DIST += tests/integration/harmony.sh tests/integration/harmony_check.py
# [responses] POST /v1/responses == /v1/chat/completions on the same conversation (qwen3 + hermes, gpt-oss's harmony),
# whole and streamed through the openai client; its refusals, /metrics, the trace, a client leaving mid-stream
TESTS += tests/integration/responses.sh
EXTRA_DIST += tests/integration/responses.sh tests/integration/responses_check.py
# [anthropic] POST /v1/messages (Anthropic's Messages API) == /v1/chat/completions on the same conversation (qwen3 +
# hermes), whole and streamed through the anthropic SDK; count_tokens, stop sequences, tool round trips, its errors
TESTS += tests/integration/anthropic.sh
EXTRA_DIST += tests/integration/anthropic.sh tests/integration/anthropic_check.py \
	tests/integration/stream_checks.py   # (responses_check.py uses it too)
