# sits_hwloc.m4 -- hwloc 2.x (topology discovery and binding). Required.
AC_DEFUN([SITS_CHECK_HWLOC], [SITS_CHECK_LIB([HWLOC], [hwloc], [hwloc >= 2.0], [hwloc.h], [hwloc], [hwloc_topology_init], [yes])])
