# tests/hardening.mk -- robustness tests (see tests/RELIABILITY.md), included by Makefile.am:
#   tests/integration/faults_serve.sh  server faults under mpirun: kill -9 follower / leader mid-stream,
#                                      SIGSTOP -> deadline, unreadable shard, 50 random client disconnects
#   tests/integration/leaks_serve.sh   LeakSanitizer after a server session (--enable-asan builds; else skip)
#   tests/soak/soak.sh                 CI soak: 80 % of measured capacity for 60 s (SOAK_SECONDS=1800 by hand)
# The libFuzzer targets (tests/fuzz/) build with clang through tests/fuzz/build.sh, outside make check.
TESTS += tests/integration/faults_serve.sh tests/integration/leaks_serve.sh tests/soak/soak.sh
# tests/soak by file, not as a folder: `make dist` takes a folder from the build tree when one of that
# name is there, and a VPATH build's tests/soak holds the soak's logs, not its scripts
EXTRA_DIST += tests/integration/faults_serve.sh tests/integration/leaks_serve.sh tests/fuzz \
	tests/soak/soak.sh tests/soak/loadgen.py tests/soak/sse_check.py \
	tests/lsan.supp tests/RELIABILITY.md
# In an --enable-asan build every test runs with leak detection off (Open MPI keeps its allocations until
# exit; leaks_serve.sh turns it on with tests/lsan.supp) and UBSan fatal with a stack; a caller's
# ASAN_OPTIONS / UBSAN_OPTIONS win.
AM_TESTS_ENVIRONMENT += SITS_SAN_FLAGS='$(SITS_SAN_FLAGS)'; export SITS_SAN_FLAGS; \
	if test -n "$$SITS_SAN_FLAGS"; then ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0}; \
	UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}; export ASAN_OPTIONS UBSAN_OPTIONS; fi;
# the soak's JSON summary (tests/soak/soak-<seconds>s.json in the build tree): make distcheck's
# distcleancheck wants the build tree empty after distclean
clean-local:
	-rm -f tests/soak/soak-*s.json
