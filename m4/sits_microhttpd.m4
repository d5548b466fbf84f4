# sits_microhttpd.m4 -- libmicrohttpd (the HTTP front-end on the leader). Required.
AC_DEFUN([SITS_CHECK_MICROHTTPD], [SITS_CHECK_LIB([MHD], [microhttpd], [libmicrohttpd], [microhttpd.h], [microhttpd], [MHD_start_daemon], [yes])])
