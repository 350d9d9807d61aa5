# Used as a ctest command when a test prerequisite is missing: fails with MSG.
message(FATAL_ERROR "${MSG}")
