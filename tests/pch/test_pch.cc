// The source of pdserve_test_pch, the target that builds the tests' precompiled header.
