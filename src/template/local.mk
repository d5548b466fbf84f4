# src/template: the Jinja2 interpreter for chat templates (jinja2's ImmutableSandboxedEnvironment as
# transformers' apply_chat_template configures it). Test: tests/unit/test_template (fixtures from
# tests/ref/gen_template_fixtures.py -> tests/fixtures/templates/).
libsits_a_SOURCES += src/template/template.h src/template/tmpl_internal.h src/template/lexer.c \
	src/template/parser.c src/template/value.c src/template/eval.c src/template/builtins.c

check_PROGRAMS += tests/unit/test_template
tests_unit_test_template_SOURCES = tests/unit/test_template.c
tests_unit_test_template_LDADD = $(SITS_LIBS)
TESTS += tests/unit/test_template

# Benchmark (not a test): µs per render of the corpus templates.
noinst_PROGRAMS += bench/sits-bench-template
bench_sits_bench_template_SOURCES = bench/bench_template.c
bench_sits_bench_template_LDADD = $(SITS_LIBS)
