#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite.
# The fixtures are expected at ../shared/fixtures (override with EMBER_FIXTURES_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
