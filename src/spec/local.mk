# src/spec: speculative decoding (the --speculative-config, the n-gram drafter, acceptance, k adaptation);
# the scheduler drives it, the verification is an ordinary step.
libsits_a_SOURCES += src/spec/spec.c src/spec/draft.c src/spec/spec.h
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_spec
tests_unit_test_spec_SOURCES = tests/unit/test_spec.c
tests_unit_test_spec_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_spec_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_spec
endif
# end to end on the demo model, TP 1 and 2, PP 2: identical outputs with and without speculation
TESTS += tests/integration/spec_decode.sh tests/integration/spec_decode_pp.sh tests/integration/spec_draft.sh tests/gpu/spec_cuda.sh
EXTRA_DIST += tests/integration/spec_decode.sh tests/integration/spec_decode_pp.sh tests/integration/spec_draft.sh tests/integration/spec_decode.py \
	tests/gpu/spec_cuda.sh
# the trained draft of the demo model (models/demo-draft) drafting for it: same outputs, acceptance above a floor
TESTS += tests/integration/spec_draft_demo.sh
EXTRA_DIST += tests/integration/spec_draft_demo.sh models/demo-draft
# the speculative decoding benchmark (tokens/s per user at batch 1 with and without n-gram drafts), and the replay of
# n-gram drafting policies on recorded outputs (its replay of the server's policy == the server's counts)
EXTRA_DIST += bench/spec_bench.py bench/spec_sim.py bench/spec_project.py
TESTS += tests/integration/spec_sim.sh
EXTRA_DIST += tests/integration/spec_sim.sh
# the premise of bit-exactness: a verification step's logits equal one position per step's (TP 1, 2)
check_PROGRAMS += tests/integration/spec_logits
tests_integration_spec_logits_SOURCES = tests/integration/spec_logits.c
TESTS += tests/integration/spec_logits.sh
EXTRA_DIST += tests/integration/spec_logits.sh
