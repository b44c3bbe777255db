#!/usr/bin/env bash
# The MoE GPU tests and a short MoE bench (scripts/gpu_test.sh's kit, with only the fixtures
# the MoE tests read, so that it travels in a few MiB beside another kit):
#   scripts/gpu_moe_run.sh pack KIT.tar.xz        here: build and pack (after build/ is set up)
#   scripts/gpu_moe_run.sh KIT.tar.xz [gtest filter] [shape type]...
#                                                 there: the tests, then for each shape and type
#                                                 `ember synth` of it (random weights, the
#                                                 fixtures' vocabulary) and `ember bench --gpu 0`
set -uo pipefail
if [ "$1" = pack ]; then
    set -e
    cd "$(dirname "$0")/.."
    stage=$(mktemp -d)
    mkdir -p "$stage/lib" "$stage/fixtures"
    flock /tmp/ember-build.lock cmake --build build -j2 --target ember test_gpu
    strip -o "$stage/ember" build/app/ember
    strip -o "$stage/test_gpu" build/tests/test_gpu
    for bin in "$stage/ember" "$stage/test_gpu"; do
        ldd "$bin" | awk '/=> \// {print $3}' | grep -v -E 'libcuda|libcublas|libcudart' |
            xargs -r -I{} cp -L {} "$stage/lib/"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    tar -C "${EMBER_FIXTURES_DIR:-../shared/fixtures}" -cf - arch/qwen3moe/qwen3moe.gguf \
        arch/qwen3moe/ref.json arch/gptoss/gptoss.gguf arch/gptoss/ref.json \
        quant/qfix-MXFP4.gguf quant/qfix-MXFP4.gguf.ref.json | tar -C "$stage/fixtures" -xf -
    tar -C "$stage" -cf - . | xz -9e -T2 >"$2"
    rm -rf "$stage"
    du -sh "$2"
    exit 0
fi
kit=$1
filter=${2:-*Moe*}
out=${OUT:-/tmp/gpu_out}
k=/tmp/moekit
mkdir -p "$out" "$k"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit" "$k"
cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -1)")
loader="$k/lib/ld-linux-x86-64.so.2 --library-path $k/lib:$cuda_lib"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
start=$(date +%s)
EMBER_FIXTURES_DIR=$k/fixtures timeout 400 $loader "$k/test_gpu" --gtest_filter="$filter" \
    >"$out/test_gpu.log" 2>&1 || status=$?
echo "test_gpu: exit $status after $(($(date +%s) - start)) s"
grep -E '^\[  FAILED  \]|^\[(kv|gpu|ref)\]|Failure|^\[==========\]|^\[  PASSED|^\[       OK' \
    "$out/test_gpu.log" | head -90
grep -B2 -A12 'Failure' "$out/test_gpu.log" | head -60
# Each shape given: synthesize it, bench it; PROFILE=1: Nsight Compute's time of each kernel of
# a few decode steps of the first shape (graphs off, so each launch is seen), the CSV under $OUT.
shift 2 || true
while [ $# -ge 2 ]; do
    shape=$1 type=$2
    shift 2
    model=/tmp/$shape-$type.gguf
    case $shape in gpt-oss*) vocab=arch/gptoss/gptoss.gguf ;; *) vocab=arch/qwen3moe/qwen3moe.gguf ;; esac
    start=$(date +%s)
    if ! timeout 200 $loader "$k/ember" synth --shape "$shape" --type "$type" --vocab-from \
        "$k/fixtures/$vocab" -o "$model" -t 16 >"$out/synth-$shape.log" 2>&1; then
        echo "synth $shape failed:"; tail -3 "$out/synth-$shape.log"; continue
    fi
    echo "synth $shape $type: $(($(date +%s) - start)) s"
    timeout 150 $loader "$k/ember" bench -m "$model" --gpu 0 -p 512 -n 64 --reps 2 --json \
        --no-bandwidth >"$out/bench-$shape.json" 2>&1
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], "prefill", round(d["prefill_tps"],1), "decode", round(d["decode_tps"],1), "weight bytes/token", d["weight_bytes_per_token"])' "$out/bench-$shape.json" "$shape $type" || tail -3 "$out/bench-$shape.json"
    if [ "${PROFILE:-0}" = 1 ]; then
        PROFILE=0
        ncu=$(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
        [ -n "$ncu" ] || ncu=$(command -v ncu)
        start=$(date +%s)
        EMBER_CUDA_GRAPHS=0 timeout 240 "$ncu" --cache-control none --clock-control none \
            --metrics gpu__time_duration.sum,dram__bytes.sum --launch-skip "${SKIP:-2500}" \
            --launch-count "${COUNT:-700}" --csv --log-file "$out/ncu.csv" $loader "$k/ember" \
            bench -m "$model" --gpu 0 -p 8 -n 16 --reps 1 --no-bandwidth \
            >/dev/null 2>"$out/ncu.err" || true
        echo "profile: $(($(date +%s) - start)) s, $(wc -l <"$out/ncu.csv") lines"
    fi
    rm -f "$model"
done
exit $status
