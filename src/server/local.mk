# src/server: the OpenAI-compatible HTTP front-end of the TP leader (libmicrohttpd, jansson).
# Test: tests/server/test_server (a fake scheduler + the bytelevel fixture tokenizer, loopback sockets).
libsits_a_SOURCES += src/server/server.h src/server/srv_internal.h src/server/server.c src/server/api.c \
	src/server/textout.c src/server/metrics.c src/server/tools.c src/server/reasoning.c \
	src/server/harmony.c src/server/responses.h src/server/responses.c src/server/translate.c \
	src/server/anthropic.h src/server/anthropic.c

check_PROGRAMS += tests/server/test_server
tests_server_test_server_SOURCES = tests/server/test_server.c tests/server/fake_sched.c tests/server/fake_sched.h \
	tests/server/http_client.c tests/server/http_client.h
tests_server_test_server_LDADD = $(SITS_LIBS)
TESTS += tests/server/test_server

# [tool calls] the output parsers on each family's format, the parser choice from real templates, forced-call grammars.
check_PROGRAMS += tests/server/test_tools
tests_server_test_tools_SOURCES = tests/server/test_tools.c
tests_server_test_tools_LDADD = $(SITS_LIBS)
TESTS += tests/server/test_tools

# [reasoning] the reasoning parsers (deepseek_r1, qwen3): vLLM's own test cases whole and streamed at every
# split, auto from real templates (cmocka).
if HAVE_CMOCKA
check_PROGRAMS += tests/server/test_reasoning
tests_server_test_reasoning_SOURCES = tests/server/test_reasoning.c
tests_server_test_reasoning_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_server_test_reasoning_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/server/test_reasoning
endif

# [reasoning] gpt-oss's harmony output (openai_gptoss): vLLM's / openai-harmony's cases and the real template's
# turns, whole and streamed at every split; the detokenizer's keep list (cmocka).
if HAVE_CMOCKA
check_PROGRAMS += tests/server/test_harmony
tests_server_test_harmony_SOURCES = tests/server/test_harmony.c tests/server/fake_sched.c tests/server/fake_sched.h \
	tests/server/http_client.c tests/server/http_client.h
tests_server_test_harmony_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_server_test_harmony_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/server/test_harmony
endif
