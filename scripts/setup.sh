#!/usr/bin/env bash
# Installs the Debian bookworm packages Ember needs (only the missing ones) and builds it.
#
# Usage: scripts/setup.sh [--runtime] [BUILD_DIR [CMAKE_ARGS...]]   (default BUILD_DIR: build)
#   --runtime  only what building and running the `ember` binary needs (compiler, cmake, the
#              libraries it links, pip for scripts/get-model.sh), and only the `ember` target.
#              A fresh BUILD_DIR is configured without tests and benchmarks; an existing one
#              keeps its options (it may be the test build) and only `ember` is rebuilt.
#   (none)     everything the test suite needs too, the whole build with tests and benchmarks
#              on, then the test suite's Python environment (scripts/test_venv.sh).
#   CMAKE_ARGS go to the full build's configure step (scripts/test.sh: -DEMBER_WERROR=ON in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=0
case ${1:-} in
  --runtime) RUNTIME=1; shift ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "setup: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
BUILD_DIR=${1:-build}
(($#)) && shift
EXTRA_CMAKE_ARGS=("$@")

# What the `ember` target needs: CMakeLists.txt's find_package/pkg_check_modules (top level,
# engine, sessions, ui, app) and a compiler. Nothing here is only for the tests.
RUNTIME_PACKAGES=(cmake g++ make pkg-config
                  libcli11-dev nlohmann-json3-dev libxxhash-dev libzstd-dev
                  libpcre2-dev libutf8proc-dev libmd4c-dev libsqlite3-dev libncurses-dev
                  libreadline-dev libcpp-httplib-dev libcurl4-openssl-dev libssl-dev python3-pip)
# Only for the test suite, the benchmarks and the developer tools (python3-venv: the tests'
# Python environment, scripts/test_venv.sh).
TEST_PACKAGES=(clang git libgtest-dev libbenchmark-dev tmux clang-format python3-venv)

PACKAGES=("${RUNTIME_PACKAGES[@]}")
((RUNTIME)) || PACKAGES+=("${TEST_PACKAGES[@]}")
missing=()
for p in "${PACKAGES[@]}"; do
  # What needs these is `python3 -m pip` (get-model.sh) and `python3 -m venv` (test_venv.sh),
  # not Debian's packages: a python3 first on PATH (pyenv, a venv) that has them is enough.
  case "$p" in
    python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
    python3-venv) python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Two setups on one build directory (two start.sh, a test running start.sh while another
# does) would run two builds in it at once: the second waits for the first.
mkdir -p "$BUILD_DIR"
exec 9>>"$BUILD_DIR/.setup.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

if ((RUNTIME)); then
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    # Tests off: configuring then needs no GTest or Google Benchmark (CMakeLists.txt only
    # looks for them under EMBER_BUILD_TESTS).
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
  fi
  # An existing build directory keeps its options (tests stay on in the shared `build`);
  # when `ember` is up to date this is a no-op.
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target ember
  exit 0
fi

# Tests and benchmarks explicitly on: a directory first configured by --runtime gets them back.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON "${EXTRA_CMAKE_ARGS[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
# The Python environment some tests use; its script may not exist in every checkout yet.
if [ -f scripts/test_venv.sh ]; then
  bash scripts/test_venv.sh "$BUILD_DIR"
fi
