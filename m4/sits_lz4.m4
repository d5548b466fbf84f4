# sits_lz4.m4 -- liblz4 (KV offload and shard compression). Required.
AC_DEFUN([SITS_CHECK_LZ4], [SITS_CHECK_LIB([LZ4], [lz4], [liblz4], [lz4frame.h], [lz4], [LZ4F_compressFrame], [yes])])
