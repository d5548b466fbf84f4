# sits_jansson.m4 -- jansson (config.json, safetensors headers, tokenizer.json, HTTP bodies). Required.
AC_DEFUN([SITS_CHECK_JANSSON], [SITS_CHECK_LIB([JANSSON], [jansson], [jansson >= 2.10], [jansson.h], [jansson], [json_loads], [yes])])
