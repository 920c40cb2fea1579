# MGTRAIN_SANITIZE: a comma-separated list of sanitizers for every target (address,undefined).
# MGTRAIN_FUZZ: build the libFuzzer targets under tests/fuzz (needs clang).
set(MGTRAIN_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined")
option(MGTRAIN_FUZZ "Build the libFuzzer targets (clang)" OFF)
