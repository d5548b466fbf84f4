# sits_mpi.m4 -- MPI (Open MPI): the ompi-c pkg-config module, else `mpicc -showme`. Required.
# --with-mpi=DIR looks for DIR/bin/mpicc.
AC_DEFUN([SITS_CHECK_MPI], [
  AC_ARG_WITH([mpi], [AS_HELP_STRING([--with-mpi@<:@=DIR@:>@], [MPI installation (mpicc in DIR/bin)])],
              [sits_with_mpi=$withval], [sits_with_mpi=check])
  AS_IF([test "x$sits_with_mpi" = xno], [AC_MSG_ERROR([MPI is required; --without-mpi is not supported])])
  MPI_CFLAGS=
  MPI_LIBS=
  have_MPI=no
  AS_IF([test "x$sits_with_mpi" = xyes || test "x$sits_with_mpi" = xcheck], [
    PKG_CHECK_MODULES([MPI], [ompi-c], [have_MPI=probe], [have_MPI=no])
    sits_mpicc=mpicc
  ], [sits_mpicc="$sits_with_mpi/bin/mpicc"])
  AS_IF([test "x$have_MPI" = xno], [
    AC_MSG_CHECKING([for MPI flags from $sits_mpicc -showme])
    AS_IF([sits_c=`$sits_mpicc -showme:compile 2>/dev/null` && sits_l=`$sits_mpicc -showme:link 2>/dev/null`], [
      MPI_CFLAGS=$sits_c; MPI_LIBS=$sits_l; have_MPI=probe; AC_MSG_RESULT([$MPI_CFLAGS $MPI_LIBS])
    ], [AC_MSG_RESULT([no])])
  ])
  AS_IF([test "x$have_MPI" = xprobe], [
    sits_save_CPPFLAGS=$CPPFLAGS; sits_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $MPI_CFLAGS"; LIBS="$MPI_LIBS $LIBS"
    have_MPI=yes
    AC_CHECK_HEADER([mpi.h], [], [have_MPI=no])
    AS_IF([test "x$have_MPI" = xyes], [AC_MSG_CHECKING([for MPI_Init_thread]);
      AC_LINK_IFELSE([AC_LANG_CALL([], [MPI_Init_thread])], [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_MPI=no])])
    CPPFLAGS=$sits_save_CPPFLAGS; LIBS=$sits_save_LIBS
  ])
  AS_IF([test "x$have_MPI" != xyes], [AC_MSG_ERROR([MPI not found: install libopenmpi-dev (Debian) or pass --with-mpi=DIR])])
  AC_PATH_PROGS([MPIRUN], [mpirun mpiexec], [mpirun], [$PATH:$sits_with_mpi/bin])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
])
