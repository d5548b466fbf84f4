# sits_pcre2.m4 -- PCRE2 8-bit (tokenizer pre-tokenizer regex). Required.
AC_DEFUN([SITS_CHECK_PCRE2], [
  AC_DEFINE([PCRE2_CODE_UNIT_WIDTH], [8], [PCRE2 code unit width used by sits-dist.])
  SITS_CHECK_LIB([PCRE2], [pcre2], [libpcre2-8], [pcre2.h], [pcre2-8], [pcre2_compile_8], [yes])])
