#!/usr/bin/env bash
# Where a GPU decode step's time goes: Nsight Compute's duration of every kernel of a few decode
# steps (graphs off, so each launch is seen), summed by kernel name. Runs on the GPU machine
# from the bench kit of scripts/gpu_compare.sh (.gpukit/bench.tar.xz); prints the table and
# leaves it in $OUT/profile.txt.
#   scripts/gpu_profile.sh [shape]    (default qwen3-1.7b, q4_k_m)
# PROMPT_WORDS (default 500) sets the context the decode steps run at; SKIP (default 3000) the
# launches of the prompt's prefill that are not profiled (about 600 per 256 prompt tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_out}
shape=${1:-qwen3-1.7b}
k=/tmp/profkit
rm -rf "$k" && mkdir -p "$k" "$out"
tar -C "$k" -xJf .gpukit/bench.tar.xz
cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* | head -1)")
run_ember() { "$k/lib/ld-linux-x86-64.so.2" --library-path "$k/lib:$cuda_lib" "$k/ember" "$@"; }
model=/tmp/$shape.gguf
vocab=$k/qwen3-vocab.gguf
[[ $shape == llama* ]] && vocab=$k/llama3-vocab.gguf
[ -f "$model" ] || run_ember synth --shape "$shape" --type q4_k_m --vocab-from "$vocab" \
    -o "$model" -t 8 >/dev/null
ncu=$(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -n "$ncu" ] || ncu=$(command -v ncu)
# A 512-token prompt (cuBLAS prefill), then decode steps; skip the prompt and the first steps.
prompt=$(python3 -c "print(' '.join(['word'] * ${PROMPT_WORDS:-500}))")
EMBER_CUDA_GRAPHS=0 "$ncu" --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    --launch-skip "${SKIP:-3000}" --launch-count "${COUNT:-1200}" --csv --log-file "$out/ncu.csv" \
    "$k/lib/ld-linux-x86-64.so.2" --library-path "$k/lib:$cuda_lib" "$k/ember" run -m "$model" \
    --gpu 0 -n 40 --temp 0 --no-spec -p "$prompt" >/dev/null 2>"$out/ncu.err" || true
python3 - "$out/ncu.csv" <<'PY' | tee "$out/profile.txt"
import csv, sys, collections, io
text = open(sys.argv[1]).read()
start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
total = collections.Counter(); count = collections.Counter()
extra = collections.defaultdict(lambda: collections.defaultdict(float))
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(r.get("Metric Unit", ""), 1.0)
        try: extra[r["Kernel Name"]][r["Metric Name"]] = scale * float(r["Metric Value"].replace(",", ""))
        except ValueError: pass
        continue
    name = r["Kernel Name"].split("(")[0].split("<")[0]
    if "gemv_kernel" in r["Kernel Name"]:
        name = "gemv " + r["Kernel Name"].split("<")[1].split(",")[0].split("::")[-1] + (" gated" if "Silu" in r["Kernel Name"] or "GeluTanh" in r["Kernel Name"] else "")
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    total[name] += v; count[name] += 1
s = sum(total.values())
print(f"{len(rows)} kernels, {s:.1f} us in all")
for name, v in total.most_common():
    print(f"{v / s * 100:5.1f}%  {v:9.1f} us  {count[name]:5d} x {v / count[name]:6.2f} us  {name}")
print()
print("per instance (last seen): registers, warps active %, DRAM bytes")
for kname, m in extra.items():
    print(f"  {m.get('launch__registers_per_thread', 0):4.0f} regs {m.get('sm__warps_active.avg.pct_of_peak_sustained_active', 0):5.1f}% {m.get('dram__bytes.sum', 0) / 1e6:8.3f} MB  {kname[:150]}")
PY
