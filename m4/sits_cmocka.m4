# sits_cmocka.m4 -- cmocka (unit tests). Optional: without it the unit tests are not built.
AC_DEFUN([SITS_CHECK_CMOCKA], [SITS_CHECK_LIB([CMOCKA], [cmocka], [cmocka], [cmocka.h], [cmocka], [_cmocka_run_group_tests], [no],
[#include <stdarg.h>
#include <setjmp.h>])])
