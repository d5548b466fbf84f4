# src/tokenizer: tokenizer.json (normalizers, pre-tokenizers, BPE/Unigram/WordPiece, decoders, post-processors), added tokens, streaming
# detokenizer, chat templates. Test: tests/unit/test_tokenizer (fixtures from tests/ref/gen_tokenizer_fixtures.py).
libsits_a_SOURCES += src/tokenizer/tokenizer.h src/tokenizer/tok_internal.h src/tokenizer/tokenizer.c \
	src/tokenizer/tok_util.c src/tokenizer/normalizers.c src/tokenizer/pretok.c src/tokenizer/models.c \
	src/tokenizer/decoders.c src/tokenizer/postproc.c src/tokenizer/chat.h src/tokenizer/chat.c

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
check_PROGRAMS += tests/unit/test_tokenizer_real
tests_unit_test_tokenizer_real_SOURCES = tests/unit/test_tokenizer_real.c
tests_unit_test_tokenizer_real_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_tokenizer_real
