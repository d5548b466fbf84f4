# sits_lib.m4 -- one generic probe for a C library dependency.
#
# SITS_CHECK_LIB(VAR, OPTNAME, PKG-MODULE, HEADER, LIB, FUNCTION, REQUIRED, [HEADER-PROLOGUE])
#   --with-OPTNAME[=DIR]: "yes"/"check" (default) uses pkg-config, then a plain header + library
#   probe; DIR adds DIR/include and DIR/lib (or lib64). REQUIRED=yes: missing is an error;
#   REQUIRED=no: missing only disables it, unless the user asked for it explicitly.
#   Sets and substitutes VAR_CFLAGS, VAR_LIBS, have_VAR (yes/no), defines HAVE_VAR and the
#   automake conditional HAVE_VAR on every path.
AC_DEFUN([SITS_CHECK_LIB], [
  AC_ARG_WITH([$2],
    [AS_HELP_STRING([--with-$2@<:@=DIR@:>@], [use $2 (optionally installed under DIR)])],
    [sits_with_$1=$withval], [sits_with_$1=check])
  have_$1=no
  $1_CFLAGS=
  $1_LIBS=
  AS_IF([test "x$sits_with_$1" = xno], [
    AS_IF([test "x$7" = xyes], [AC_MSG_ERROR([$2 is required; --without-$2 is not supported])])
  ], [test "x$sits_with_$1" != xyes && test "x$sits_with_$1" != xcheck], [
    # an explicit directory
    $1_CFLAGS="-I$sits_with_$1/include"
    AS_IF([test -d "$sits_with_$1/lib64"], [$1_LIBS="-L$sits_with_$1/lib64"], [$1_LIBS="-L$sits_with_$1/lib"])
    $1_LIBS="$$1_LIBS -l$5"
    have_$1=probe
  ], [
    PKG_CHECK_MODULES([$1], [$3], [have_$1=probe], [
      $1_CFLAGS=
      $1_LIBS="-l$5"
      have_$1=probe
    ])
  ])
  AS_IF([test "x$have_$1" = xprobe], [
    sits_save_CPPFLAGS=$CPPFLAGS
    sits_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $$1_CFLAGS"
    LIBS="$$1_LIBS $LIBS"
    have_$1=yes
    AC_CHECK_HEADER([$4], [], [have_$1=no], [AC_INCLUDES_DEFAULT
$8])
    AS_IF([test "x$have_$1" = xyes], [
      AC_MSG_CHECKING([for $6 in $$1_LIBS])
      AC_LINK_IFELSE([AC_LANG_CALL([], [$6])], [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_$1=no])
    ])
    CPPFLAGS=$sits_save_CPPFLAGS
    LIBS=$sits_save_LIBS
  ])
  AS_IF([test "x$have_$1" = xno], [
    $1_CFLAGS=
    $1_LIBS=
    AS_IF([test "x$7" = xyes], [AC_MSG_ERROR([$2 not found (header $4, library -l$5); install its -dev package or use --with-$2=DIR])])
    AS_IF([test "x$sits_with_$1" != xcheck && test "x$sits_with_$1" != xno],
          [AC_MSG_ERROR([--with-$2 was given but $2 was not found (header $4, library -l$5)])])
  ])
  AS_IF([test "x$have_$1" = xyes], [AC_DEFINE([HAVE_$1], [1], [Define to 1 when $2 is available.])])
  AM_CONDITIONAL([HAVE_$1], [test "x$have_$1" = xyes])
  AC_SUBST([$1_CFLAGS])
  AC_SUBST([$1_LIBS])
])
