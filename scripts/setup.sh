#!/usr/bin/env bash
# Installs the Debian bookworm packages Ember needs (only the missing ones) and builds it.
# Usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

PACKAGES=(cmake g++ clang make pkg-config git
          libcli11-dev libeigen3-dev nlohmann-json3-dev libxxhash-dev libzstd-dev libpcre2-dev
          libutf8proc-dev libmd4c-dev libsqlite3-dev libncurses-dev libreadline-dev libgtest-dev
          libbenchmark-dev tmux clang-format libcpp-httplib-dev nodejs npm)
missing=()
for p in "${PACKAGES[@]}"; do
  # NodeSource's nodejs carries npm and conflicts with Debian's npm package: a node and npm
  # already on PATH are enough (the tests need the commands, not the Debian packages).
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
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

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
