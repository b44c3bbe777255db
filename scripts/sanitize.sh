#!/usr/bin/env bash
# The unit tests and the fuzz drivers built with AddressSanitizer and UndefinedBehaviorSanitizer
# (build-asan): CI's last stage (.ci/run). Any report (a leak too: .ci/lsan.supp lists none)
# fails the test that made it. On the 2-core machines the build takes about 1,700 s of CPU
# (15-25 minutes) and the tests about 12 minutes with -j2; the tests that run long under the
# sanitizers check fewer cases there (tests/support/sanitizers.h, kSanitized).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=${CI:-true}
# The sanitizer build: the CPU engine (nvcc's code takes no sanitizers), no benchmarks, Debug
# so asserts are on, at -O1, which keeps the kernels' tests fast enough under ASan, and line
# tables only (-g1: the reports' file:line, a fifth less compile time than -g). Only what
# `ctest -L "unit|fuzz"` runs is built (tests/CMakeLists.txt: unit_tests; tests/fuzz:
# fuzz_drivers).
start=$SECONDS
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DEMBER_CUDA=OFF -DEMBER_SANITIZE=address,undefined \
  -DEMBER_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$(nproc)" --target unit_tests fuzz_drivers
built=$SECONDS
# A report stops the test with its stack; -fno-sanitize-recover=all (CMakeLists.txt) makes
# UBSan's reports fatal too.
export ASAN_OPTIONS=halt_on_error=1:print_stacktrace=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp:print_suppressions=0"
ctest --test-dir build-asan -L "unit|fuzz" --output-on-failure -j"$(nproc)" --timeout 900
echo "ci: sanitizer stage: build $((built - start)) s, tests $((SECONDS - built)) s"
