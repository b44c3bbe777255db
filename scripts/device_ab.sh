#!/usr/bin/env bash
# A/B of two ember binaries on one machine's CPU (the device machine's 16 quiet cores, or any
# machine), alternating A B B A ... so drift hits both alike. For each SPEC
# `shape:type:vocab.gguf:bench args...` (args with commas for spaces), `ember synth` the shape
# once (into $MODELS, default /tmp/models), then ROUNDS (default 3) rounds of `ember bench`
# with each binary, pinned with taskset to the first THREADS (default 8) physical cores. One
# JSON line per run goes to $OUT/ab.jsonl; a table of medians and ratios (B / A) ends the output.
#
# KIT (default: this script's directory) holds ember-a, ember-b, the vocab GGUFs and lib/ with
# their shared libraries and glibc's loader (run as `lib/ld-linux-x86-64.so.2 --library-path lib`).
#
#   OUT=/tmp/out KIT=.devkit scripts/device_ab.sh qwen3-1.7b:q4_k_m:v_qwen3.gguf:-p,512,-n,64
set -u
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-8}
K=$(cd "${KIT:-$(dirname "$0")}" && pwd)
LD="$K/lib/ld-linux-x86-64.so.2 --library-path $K/lib"
M=${MODELS:-/tmp/models}; mkdir -p "$M" "$OUT"
RES=$OUT/ab.jsonl
CPUS=$(python3 - "$THREADS" <<'PY'
import glob,re,sys
seen=set();out=[]
for p in sorted(glob.glob('/sys/devices/system/cpu/cpu[0-9]*'),key=lambda s:int(re.findall(r'\d+$',s)[0])):
    n=int(re.findall(r'\d+$',p)[0])
    try:
        core=open(p+'/topology/core_id').read().strip(); pkg=open(p+'/topology/physical_package_id').read().strip()
    except OSError: continue
    if (pkg,core) in seen: continue
    seen.add((pkg,core)); out.append(str(n))
print(','.join(out[:int(sys.argv[1])]))
PY
)
lscpu | grep -E "Model name" ; echo "cpus: $CPUS"
bench() {  # label file args...
  local label=$1 f=$2; shift 2
  local j; j=$(taskset -c "$CPUS" $LD "$K/ember-${label,,}" bench -m "$f" -t "$THREADS" --reps 1 --json "$@" 2>/dev/null | tail -1)
  [ -n "$j" ] || j='{}'
  echo "{\"label\":\"$label\",\"spec\":\"$(basename "$f") $*\",\"r\":$j}" >>"$RES"
}
for spec in "$@"; do
  IFS=: read -r shape type vocab args <<<"$spec"
  f=$M/${shape}_${type}.gguf
  [ -f "$f" ] || $LD "$K/ember-a" synth --shape "$shape" --type "$type" --vocab-from "$K/$vocab" -o "$f" -t 16 | tail -1
  read -r -a a <<<"${args//,/ }"
  # One untimed run of each first: the file's pages into the page cache, the CPUs' clocks up.
  for label in a b; do taskset -c "$CPUS" $LD "$K/ember-$label" bench -m "$f" -t "$THREADS" --reps 1 --json "${a[@]}" >/dev/null 2>&1; done
  for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then bench A "$f" "${a[@]}"; bench B "$f" "${a[@]}"; else bench B "$f" "${a[@]}"; bench A "$f" "${a[@]}"; fi
  done
done
python3 - "$RES" <<'PY'
import json,sys,statistics as st
from collections import defaultdict
d=defaultdict(lambda: defaultdict(list))
for l in open(sys.argv[1]):
    r=json.loads(l)
    if 'prefill_tps' in r['r']: d[r['spec']][r['label']].append(r['r'])
print(f"{'spec':52} {'prefill A':>10} {'B':>8} {'B/A':>6} {'decode A':>9} {'B':>7} {'B/A':>6}")
for k,v in d.items():
    if not v['A'] or not v['B']: print(k,'incomplete'); continue
    pa=st.median(x['prefill_tps'] for x in v['A']); pb=st.median(x['prefill_tps'] for x in v['B'])
    da=st.median(x['decode_tps'] for x in v['A']); db=st.median(x['decode_tps'] for x in v['B'])
    print(f"{k:52} {pa:10.1f} {pb:8.1f} {pb/pa:6.3f} {da:9.2f} {db:7.2f} {db/da:6.3f}")
PY
