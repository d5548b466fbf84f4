# src/tokenizer: tokenizer.json BPE (byte-level and SentencePiece-style), added tokens, streaming
# detokenizer, chat templates. Test: tests/unit/test_tokenizer (fixtures from tests/ref/gen_tokenizer_fixtures.py).
libsits_a_SOURCES += src/tokenizer/tokenizer.h src/tokenizer/tok_internal.h src/tokenizer/tokenizer.c src/tokenizer/chat.h \
	src/tokenizer/decode.c src/tokenizer/chat.c

check_PROGRAMS += tests/unit/test_tokenizer
tests_unit_test_tokenizer_SOURCES = tests/unit/test_tokenizer.c
tests_unit_test_tokenizer_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_tokenizer

# Benchmark (not a test): encode MB/s and decode tokens/s.
noinst_PROGRAMS += bench/sits-bench-tokenizer
bench_sits_bench_tokenizer_SOURCES = bench/bench_tokenizer.c
bench_sits_bench_tokenizer_LDADD = $(SITS_LIBS)

# Chat templates (chat.h): the model's own Jinja templates found, chosen and rendered as transformers does
# (fixtures from tests/ref/gen_chat_fixtures.py); --render-chat end to end.
check_PROGRAMS += tests/unit/test_chat
tests_unit_test_chat_SOURCES = tests/unit/test_chat.c
tests_unit_test_chat_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_chat
EXTRA_DIST += tests/fixtures/chat
TESTS += tests/integration/render_chat.sh
EXTRA_DIST += tests/integration/render_chat.sh
