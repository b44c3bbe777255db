// What a sanitizer build (CMake's EMBER_SANITIZE; CI's build-asan) changes for the tests: code
// runs several times slower, and AddressSanitizer reserves terabytes of address space and keeps
// freed memory in quarantine. The time and memory limits tests assert were chosen for the
// optimized build; these say how to hold them in this one.
#pragma once

namespace ember::test {

#if defined(EMBER_SANITIZED)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// A wall-clock (or CPU) limit chosen for the optimized build, for this build: ten times as
// long under the sanitizers (a 10,000,000-step template render takes ~20 s of CPU there).
constexpr double time_limit(double optimized_seconds) {
    return kSanitized ? optimized_seconds * 10 : optimized_seconds;
}

// Whether limits on the process's memory (peak RSS, RLIMIT_AS) can hold in this build: not
// under AddressSanitizer, whose shadow memory and quarantine are not the program's.
inline constexpr bool kMemoryLimitsHold = !kSanitized;

}  // namespace ember::test
