#!/usr/bin/env bash
# Thread scaling, Ember against the reference engine, on the device machine (or any machine):
# for each MODEL_SPEC `shape:type:vocab.gguf:t1,t2,...`, `ember synth` the shape (once), then for
# each thread count run `ember bench` and `llama-bench` back to back, both pinned with taskset to
# the first t physical cores (one CPU per core from sysfs). One JSON line per (shape, threads)
# goes to $OUT/results.jsonl.
#
# The kit directory (KIT, default: this script's directory) holds `ember`, `llama-bench`, the
# vocab GGUFs named in the specs and lib/ with their shared libraries and glibc's loader: both
# programs run as `lib/ld-linux-x86-64.so.2 --library-path lib PROGRAM`, whatever the host's OS.
# The reference engine is built from its public source under /tmp and never committed.
#
#   OUT=/tmp/out KIT=.devkit scripts/device_bench.sh qwen3-1.7b:q4_k_m:v_qwen3.gguf:16,8,4,2,1
#
# P and N (default 512 and 128) set the prompt and generated tokens of both engines;
# EMBER_WEIGHT_PANELS=0 in the environment runs Ember on the file's row layout (recorded as
# "panels" in each line).
set -u
P=${P:-512}
N=${N:-128}
PANELS=${EMBER_WEIGHT_PANELS:-1}
K=$(cd "${KIT:-$(dirname "$0")}" && pwd)
LD="$K/lib/ld-linux-x86-64.so.2 --library-path $K/lib"
M=/tmp/models; mkdir -p $M
RES=$OUT/results.jsonl
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|L3" | tee $OUT/cpu.txt
# one CPU per physical core, in order
CORES=$(python3 - <<'PY'
import glob,re
seen=set();out=[]
for p in sorted(glob.glob('/sys/devices/system/cpu/cpu[0-9]*'),key=lambda s:int(re.findall(r'\d+$',s)[0])):
    n=int(re.findall(r'\d+$',p)[0])
    try:
        core=open(p+'/topology/core_id').read().strip(); pkg=open(p+'/topology/physical_package_id').read().strip()
    except OSError: continue
    if (pkg,core) in seen: continue
    seen.add((pkg,core)); out.append(str(n))
print(' '.join(out))
PY
)
echo "physical-core cpus: $CORES"
for spec in "$@"; do
  IFS=: read -r shape type vocab threads <<<"$spec"
  f=$M/${shape}_${type}.gguf
  [ -f $f ] || $LD $K/ember synth --shape $shape --type $type --vocab-from $K/$vocab -o $f -t 16 | tail -1
  for t in ${threads//,/ }; do
    cpus=$(echo $CORES | tr ' ' '\n' | head -n $t | paste -sd,)
    s=$(date +%s)
    e=$(taskset -c $cpus $LD $K/ember bench -m $f -t $t -p $P -n $N --reps 1 --json 2>/dev/null)
    r=$(taskset -c $cpus $LD $K/llama-bench -m $f -t $t -p $P -n $N -r 1 -o json 2>/dev/null)
    python3 - "$shape" "$type" "$t" "$e" "$r" "$PANELS" >>$RES <<'PY'
import json,sys
shape,typ,t,e,r,panels=sys.argv[1:7]
e=json.loads(e); r=json.loads(r)
pp=next(x["avg_ts"] for x in r if x["n_prompt"]>0 and x["n_gen"]==0)
tg=next(x["avg_ts"] for x in r if x["n_gen"]>0 and x["n_prompt"]==0)
row=dict(shape=shape,type=typ,threads=int(t),panels=panels!="0",ember_prefill=e["prefill_tps"],ref_prefill=pp,ember_decode=e["decode_tps"],ref_decode=tg,roofline=e["roofline_fraction"],bw=e["bandwidth_gbs"],rss_mb=e.get("peak_rss_mb"))
print(json.dumps(row))
PY
    tail -1 $RES; echo "  ($(( $(date +%s) - s )) s)"
  done
done
