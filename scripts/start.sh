#!/usr/bin/env bash
# Installs what is missing, builds, and starts Ember on a model.
# Usage: scripts/start.sh MODEL.gguf [extra ember arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  cat >&2 <<'MSG'
usage: scripts/start.sh MODEL.gguf [arguments]

Ember needs a GGUF model file of the llama, qwen2 or qwen3 family. Any GGUF from the model
hubs works, e.g. SmolLM2-135M-Instruct or Qwen3-0.6B in Q8_0 or Q4_K_M (download the .gguf
file with your browser or `huggingface-cli download`), or one already on disk from
llama.cpp (~/.cache/llama.cpp), LM Studio (~/.lmstudio/models) or ollama's blob store.
MSG
  exit 2
fi
scripts/setup.sh build >&2
MODEL=$1
shift
build/app/ember info -m "$MODEL"
echo
if [ $# -eq 0 ]; then
  read -r -p "prompt> " PROMPT
  set -- -p "$PROMPT"
fi
exec build/app/ember run -m "$MODEL" "$@"
