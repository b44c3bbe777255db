#!/usr/bin/env bash
# Creates BUILD_DIR/venv, the Python virtual environment the tests run Python clients from
# (tests/integration/test_serve_openai_client: the official OpenAI library, PyPI `openai`;
# tests/integration/test_grammar_acceptance: the `jsonschema` validator;
# tests/integration/test_render_tool_turns: `jinja2`, the engine HF transformers renders chat
# templates with).
# Every package is pinned, dependencies included, so a new release upstream cannot change what
# the test exercises. Idempotent: once the venv holds exactly these pins it returns at once,
# without the network. The tests never install anything; they skip (fail under CI=true)
# when the venv is missing.
# Usage: scripts/test_venv.sh BUILD_DIR
set -euo pipefail

if (($# != 1)); then
  echo "usage: scripts/test_venv.sh BUILD_DIR" >&2
  exit 2
fi
VENV="$1/venv"
STAMP="$VENV/ember-pins.txt"

# openai, jsonschema, Jinja2 and what they resolved to on Python 3.11 (Debian bookworm's): the whole set is pinned.
# pip may still add a package a different Python needs (a backport), never change these.
PINS=(openai==3.57.0
      annotated-types==0.8.0
      anyio==4.16.0
      h11==0.16.0
      httpcore2==2.16.2
      httpx2==2.16.2
      idna==3.20
      jiter==0.19.0
      pydantic==2.14.4
      pydantic_core==2.50.5
      sniffio==1.3.1
      truststore==0.10.5
      typing-inspection==0.4.5
      typing_extensions==4.16.0
      jsonschema==4.26.0
      attrs==26.1.0
      jsonschema-specifications==2025.9.1
      referencing==0.37.0
      rpds-py==2026.9.1
      Jinja2==3.1.6
      MarkupSafe==3.0.4)
PIN_LIST=$(printf '%s\n' "${PINS[@]}")

fail() {
  echo "test_venv: error: $*" >&2
  exit 1
}

# The last non-blank line of a tool's output, trimmed: what the one-line errors quote.
last_line() {
  printf '%s\n' "$1" | sed 's/^[[:space:]]*//' | grep -v '^$' | tail -n 1
}

# Done already: the stamp is written last, only after a complete install, and the venv's
# interpreter still runs (a removed or upgraded base Python breaks a venv).
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PIN_LIST" ] && "$VENV/bin/python" -c '' 2>/dev/null; then
  exit 0
fi

command -v python3 >/dev/null 2>&1 || fail "python3 not found (on Debian: apt install python3 python3-venv)"

# A partial venv would make the test run and fail on a missing module instead of skipping with
# the hint to run this script: anything short of a full install is removed.
trap 'rm -rf "$VENV"' ERR

mkdir -p "$1"
if ! out=$(python3 -m venv --clear "$VENV" 2>&1); then
  rm -rf "$VENV"
  fail "python3 -m venv failed (on Debian: apt install python3-venv): $(last_line "$out")"
fi

echo "test_venv: installing openai, jsonschema, jinja2 and their dependencies (pinned) into $VENV"
# Wheels only: nothing is compiled, and a missing wheel says so instead of needing a compiler.
if ! out=$("$VENV/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
  --only-binary=:all: --timeout 30 --retries 2 "${PINS[@]}" 2>&1); then
  rm -rf "$VENV"
  fail "pip could not install the pinned packages (is PyPI reachable?): $(last_line "$out")"
fi
"$VENV/bin/python" -c 'import openai, jsonschema, jinja2' 2>/dev/null || {
  rm -rf "$VENV"
  fail "openai, jsonschema or jinja2 was installed into $VENV but does not import"
}
printf '%s\n' "$PIN_LIST" >"$STAMP"
trap - ERR
