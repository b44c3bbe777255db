#!/usr/bin/env bash
# Ember against the reference engine's llama-bench on the same GGUF files, alternating the two
# engines (ROUNDS times per file) so that both see the same minutes of a shared machine; prints
# each run and the ratios of the medians (Ember / reference).
#
# Usage: scripts/compare_reference.sh FILE.gguf [FILE.gguf ...]
# Environment: LLAMA_BENCH (default /tmp/llama.cpp/build/bin/llama-bench), EMBER (default
# build/app/ember), THREADS (2), PROMPT (512), GEN (128), REPS (3 per run), ROUNDS (2),
# DEPTH (0; otherwise both decode after DEPTH tokens of context: Ember's --depth, the
# reference's -d with flash attention on, -fa 1), KV (f16: Ember's --kv-type).
# Needs python3 for the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
EMBER=${EMBER:-build/app/ember}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
DEPTH=${DEPTH:-0}
KV=${KV:-f16}
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
for tool in "$LLAMA_BENCH" "$EMBER"; do
  [ -x "$tool" ] || { echo "compare_reference: $tool is not an executable" >&2; exit 2; }
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ref_extra=()
ember_extra=()
if [ "$DEPTH" -gt 0 ]; then
  ref_extra=(-fa 1 -d "$DEPTH")
  ember_extra=(--depth "$DEPTH")
fi

for f in "$@"; do
  for ((r = 0; r < ROUNDS; r++)); do
    "$EMBER" bench -m "$f" --json -t "$THREADS" -p "$PROMPT" -n "$GEN" --reps "$REPS" \
      --kv-type "$KV" "${ember_extra[@]}" >"$out/ember.$r.json"
    "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r "$REPS" -o json \
      "${ref_extra[@]}" >"$out/ref.$r.json" 2>/dev/null
  done
  python3 - "$f" "$out" "$ROUNDS" <<'PY'
import json, os, statistics, sys
name, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for r in range(rounds):
    e = json.load(open(os.path.join(out, f"ember.{r}.json")))
    ref = json.load(open(os.path.join(out, f"ref.{r}.json")))
    pp = next(x["avg_ts"] for x in ref if x["n_prompt"] > 0 and x["n_gen"] == 0)
    tg = next(x["avg_ts"] for x in ref if x["n_gen"] > 0 and x["n_prompt"] == 0)
    rows.append((e["prefill_tps"], pp, e["decode_tps"], tg, e["roofline_fraction"],
                 e["bandwidth_gbs"]))
    print(f"{os.path.basename(name)} round {r}: prefill {e['prefill_tps']:.1f} vs {pp:.1f}, "
          f"decode {e['decode_tps']:.2f} vs {tg:.2f}, roofline {e['roofline_fraction']:.3f} "
          f"(bandwidth {e['bandwidth_gbs']:.1f} GB/s, depth {e['depth']})")
med = lambda i: statistics.median(x[i] for x in rows)
print(f"{os.path.basename(name)}: prefill x{med(0) / med(1):.2f}, decode x{med(2) / med(3):.2f}, "
      f"roofline {med(4):.3f}")
PY
done
