# sits_cudalib.m4 -- a library that lives beside the CUDA toolkit (NCCL, cuBLASLt).
#
# SITS_CHECK_CUDA_LIB(VAR, OPTNAME, HEADER, LIB, FUNCTION)
#   Probed only when CUDA is enabled, first with the CUDA include/lib directories, then the
#   system ones (Ubuntu installs NCCL in /usr). --with-OPTNAME=DIR adds DIR; --with-OPTNAME
#   that cannot be met is an error; --without-OPTNAME leaves it out.
AC_DEFUN([SITS_CHECK_CUDA_LIB], [
  AC_ARG_WITH([$2], [AS_HELP_STRING([--with-$2@<:@=DIR@:>@], [use $2 with the CUDA backend (default: when found)])],
              [sits_with_$1=$withval], [sits_with_$1=check])
  have_$1=no
  $1_CFLAGS=
  $1_LIBS=
  AS_IF([test "x$have_CUDA" = xyes && test "x$sits_with_$1" != xno], [
    AS_IF([test "x$sits_with_$1" != xyes && test "x$sits_with_$1" != xcheck], [
      $1_CFLAGS="-I$sits_with_$1/include"
      AS_IF([test -d "$sits_with_$1/lib64"], [$1_LIBS="-L$sits_with_$1/lib64"], [$1_LIBS="-L$sits_with_$1/lib"])
    ])
    $1_LIBS="$$1_LIBS -l$4"
    sits_save_CPPFLAGS=$CPPFLAGS; sits_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $$1_CFLAGS $CUDA_CFLAGS"; LIBS="$$1_LIBS $CUDA_LIBS $LIBS"
    have_$1=yes
    AC_CHECK_HEADER([$3], [], [have_$1=no])
    AS_IF([test "x$have_$1" = xyes], [AC_MSG_CHECKING([for $5 in -l$4]);
      AC_LINK_IFELSE([AC_LANG_CALL([], [$5])], [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_$1=no])])
    CPPFLAGS=$sits_save_CPPFLAGS; LIBS=$sits_save_LIBS
    AS_IF([test "x$have_$1" = xno], [
      $1_CFLAGS=; $1_LIBS=
      AS_IF([test "x$sits_with_$1" != xcheck], [AC_MSG_ERROR([--with-$2 was given but $3 / -l$4 were not found])])
    ])
  ], [test "x$sits_with_$1" != xcheck && test "x$sits_with_$1" != xno], [
    AC_MSG_ERROR([--with-$2 needs the CUDA toolkit (--with-cuda)])
  ])
  AS_IF([test "x$have_$1" = xyes], [AC_DEFINE([HAVE_$1], [1], [Define to 1 when $2 is available.])])
  AM_CONDITIONAL([HAVE_$1], [test "x$have_$1" = xyes])
  AC_SUBST([$1_CFLAGS])
  AC_SUBST([$1_LIBS])
])
