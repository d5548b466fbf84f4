# tests: unit tests (cmocka), fixture comparisons, MPI integration tests. Each module's tests
# sit in their own fragment below.
