# tests: integration tests of the whole engine (fixtures from HF, MPI runs); each module's unit
# tests sit in that module's fragment.
check_PROGRAMS += tests/integration/test_fixtures
tests_integration_test_fixtures_SOURCES = tests/integration/test_fixtures.c
TESTS += tests/integration/fixtures_tp1.sh
EXTRA_DIST += tests/integration/fixtures_tp1.sh
