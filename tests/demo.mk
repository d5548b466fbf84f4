# tests/demo.mk -- the embedded demo model (models/demo/, trained by launch/train_demo/): held-out
# perplexity of sits-dist equals PyTorch's (TP 1 and 2), greedy and chat generation give words.
# Included by Makefile.am after tests/local.mk.
check_PROGRAMS += tests/integration/ppl
tests_integration_ppl_SOURCES = tests/integration/ppl.c
TESTS += tests/integration/demo_ppl.sh
EXTRA_DIST += tests/integration/demo_ppl.sh tests/integration/demo_ppl_ref.json models/demo
