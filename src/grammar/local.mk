# src/grammar: structured output -- JSON schema / json_object / regex / choice -> grammar -> token masks
# over the vocabulary. Test: tests/unit/test_grammar (schemas from tests/ref/gen_grammar_fixtures.py,
# validated by python jsonschema in tests/unit/grammar_validate.sh).
libsits_a_SOURCES += src/grammar/grammar.h src/grammar/gram_internal.h src/grammar/grammar.c src/grammar/schema.c \
	src/grammar/regex.c

check_PROGRAMS += tests/unit/test_grammar
tests_unit_test_grammar_SOURCES = tests/unit/test_grammar.c
tests_unit_test_grammar_LDADD = $(SITS_LIBS)
TESTS += tests/unit/grammar_validate.sh
EXTRA_DIST += tests/unit/grammar_validate.sh tests/unit/data/grammar_cases.json tests/unit/data/grammar_refused.json
# Structured output and tool calls end to end: the server (TP 2, CPU) with the openai client, jsonschema validating.
TESTS += tests/integration/structured_output.sh tests/integration/grammar_layouts.sh
EXTRA_DIST += tests/integration/structured_output.sh tests/integration/grammar_layouts.sh
# Benchmark (not a test): the host cost a constrained batch adds per step (masks, accepts, apply, plan).
noinst_PROGRAMS += bench/sits-bench-grammar
bench_sits_bench_grammar_SOURCES = bench/bench_grammar.c
bench_sits_bench_grammar_LDADD = $(SITS_LIBS)
EXTRA_DIST += bench/grammar_step.sh
