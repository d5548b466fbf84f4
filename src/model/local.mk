# src/model: config.json, safetensors, tensor layout, sharded loading.
libsits_a_SOURCES += src/model/config.c src/model/config.h src/model/safetensors.c src/model/safetensors.h \
	src/model/layout.c src/model/layout.h src/model/weights.c src/model/weights.h \
	src/model/precision.c src/model/precision.h src/model/gguf.c src/model/gguf.h src/model/gguf_dir.c \
	src/model/moe_config.c src/model/int4.c src/model/int4.h

# Unit tests of the model layer: config.json, safetensors validation, tensor layout.
# Inputs (and the Python script that made them) live in tests/unit/data/model.
EXTRA_DIST += tests/unit/data/model
if HAVE_CMOCKA
SITS_MODEL_TEST_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS) \
	-DSITS_TEST_DATA_DIR='"$(abs_top_srcdir)/tests/unit/data/model"'
SITS_MODEL_TESTS = tests/unit/test_model_config tests/unit/test_safetensors tests/unit/test_model_layout
check_PROGRAMS += $(SITS_MODEL_TESTS)
TESTS += $(SITS_MODEL_TESTS)
tests_unit_test_model_config_SOURCES = tests/unit/test_model_config.c tests/unit/test_model_common.h
tests_unit_test_model_config_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS)
tests_unit_test_model_config_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
tests_unit_test_safetensors_SOURCES = tests/unit/test_safetensors.c tests/unit/test_model_common.h
tests_unit_test_safetensors_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS)
tests_unit_test_safetensors_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
tests_unit_test_model_layout_SOURCES = tests/unit/test_model_layout.c tests/unit/test_model_common.h
tests_unit_test_model_layout_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS)
tests_unit_test_model_layout_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
# [fp8] E4M3 encoding (vs torch through the llama3_fp8 fixture), --quant parsing, FP8 checkpoint
# validation, the cpu fp8 GEMM.
check_PROGRAMS += tests/unit/test_fp8
TESTS += tests/unit/test_fp8
tests_unit_test_fp8_SOURCES = tests/unit/test_fp8.c tests/unit/test_model_common.h
tests_unit_test_fp8_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS) -DSITS_FIXTURE_DIR='"$(abs_top_srcdir)/tests/fixtures/models"'
tests_unit_test_fp8_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
# [gguf] GGUF parsing, dequantisation and HF mapping vs gguf-py / transformers (tests/unit/data/gguf,
# written by tests/ref/gen_gguf_fixture.py), corrupt images refused.
check_PROGRAMS += tests/unit/test_gguf
TESTS += tests/unit/test_gguf
tests_unit_test_gguf_SOURCES = tests/unit/test_gguf.c tests/unit/test_model_common.h
tests_unit_test_gguf_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS) -DSITS_GGUF_DATA_DIR='"$(abs_top_srcdir)/tests/unit/data/gguf"'
tests_unit_test_gguf_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
endif
# generation_config.json sampling defaults (offline and served)
TESTS += tests/integration/gen_defaults.sh
EXTRA_DIST += tests/integration/gen_defaults.sh
EXTRA_DIST += tests/unit/data/gguf
# [moe] Mixture-of-Experts config keys, refusals, expert split (TP / EP) and tensor names.
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_moe_config
TESTS += tests/unit/test_moe_config
tests_unit_test_moe_config_SOURCES = tests/unit/test_moe_config.c tests/unit/test_model_common.h
tests_unit_test_moe_config_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS)
tests_unit_test_moe_config_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
endif
# [int4] INT4 checkpoint variants (GPTQ v2 / per-channel, compressed-tensors asymmetric / channel) vs the
# formats' own dequantisation (tests/unit/data/int4, written by tests/ref/gen_int4_fixtures.py --units),
# config / tensor mismatches, the packed layout through the cpu matmul_w4.
EXTRA_DIST += tests/unit/data/int4
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_int4
TESTS += tests/unit/test_int4
tests_unit_test_int4_SOURCES = tests/unit/test_int4.c tests/unit/test_model_common.h
tests_unit_test_int4_CPPFLAGS = $(SITS_MODEL_TEST_CPPFLAGS) -DSITS_INT4_DATA_DIR='"$(abs_top_srcdir)/tests/unit/data/int4"'
tests_unit_test_int4_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
endif
