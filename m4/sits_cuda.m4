# sits_cuda.m4 -- CUDA toolkit: nvcc and the runtime. Optional (default: use when found).
# --with-cuda=DIR (else $CUDA_HOME, /usr/local/cuda, then nvcc on PATH).
# Sets NVCC, NVCCFLAGS, CUDA_CFLAGS, CUDA_LIBS, have_CUDA; conditional HAVE_CUDA.
AC_DEFUN([SITS_CHECK_CUDA], [
  AC_ARG_WITH([cuda], [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA backend (default: when nvcc is found)])],
              [sits_with_cuda=$withval], [sits_with_cuda=check])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc (project flags are added)])
  have_CUDA=no
  CUDA_CFLAGS=
  CUDA_LIBS=
  AS_IF([test "x$sits_with_cuda" != xno], [
    sits_cuda_dir=
    AS_IF([test "x$sits_with_cuda" != xyes && test "x$sits_with_cuda" != xcheck], [sits_cuda_dir=$sits_with_cuda],
          [test -n "$CUDA_HOME" && test -x "$CUDA_HOME/bin/nvcc"], [sits_cuda_dir=$CUDA_HOME],
          [test -x /usr/local/cuda/bin/nvcc], [sits_cuda_dir=/usr/local/cuda])
    AS_IF([test -z "$NVCC"], [
      AS_IF([test -n "$sits_cuda_dir"], [NVCC="$sits_cuda_dir/bin/nvcc"], [AC_PATH_PROG([NVCC], [nvcc], [])])
    ])
    AS_IF([test -z "$sits_cuda_dir" && test -n "$NVCC"], [sits_cuda_dir=`dirname "$NVCC"`; sits_cuda_dir=`dirname "$sits_cuda_dir"`])
    AC_MSG_CHECKING([for nvcc])
    AS_IF([test -n "$NVCC" && test -x "$NVCC"], [AC_MSG_RESULT([$NVCC]); have_CUDA=probe], [AC_MSG_RESULT([no])])
  ])
  AS_IF([test "x$have_CUDA" = xprobe], [
    CUDA_CFLAGS="-I$sits_cuda_dir/include"
    AS_IF([test -d "$sits_cuda_dir/lib64"], [CUDA_LIBS="-L$sits_cuda_dir/lib64"], [CUDA_LIBS="-L$sits_cuda_dir/lib"])
    sits_cuda_ldir=`echo "$CUDA_LIBS" | sed 's/^-L//'`
    CUDA_LIBS="$CUDA_LIBS -Wl,-rpath,$sits_cuda_ldir -lcudart -lstdc++"
    sits_save_CPPFLAGS=$CPPFLAGS; sits_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
    have_CUDA=yes
    AC_CHECK_HEADER([cuda_runtime.h], [], [have_CUDA=no])
    AS_IF([test "x$have_CUDA" = xyes], [AC_MSG_CHECKING([for cudaGetDeviceCount]);
      AC_LINK_IFELSE([AC_LANG_CALL([], [cudaGetDeviceCount])], [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_CUDA=no])])
    CPPFLAGS=$sits_save_CPPFLAGS; LIBS=$sits_save_LIBS
  ])
  AS_IF([test "x$have_CUDA" != xyes], [
    CUDA_CFLAGS=; CUDA_LIBS=
    AS_IF([test "x$sits_with_cuda" != xno && test "x$sits_with_cuda" != xcheck],
          [AC_MSG_ERROR([--with-cuda was given but nvcc/cudart were not found])])
  ])
  AS_IF([test "x$have_CUDA" = xyes], [AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build the CUDA backend.])])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_CUDA" = xyes])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC])
  AC_SUBST([sits_cuda_dir])
])
