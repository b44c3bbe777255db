#!/usr/bin/env bash
# The MoE GPU tests and a short MoE bench (scripts/gpu_test.sh's kit, with only the fixtures
# the MoE tests read, so that it travels in a few MiB beside another kit):
#   scripts/gpu_moe_run.sh pack KIT.tar.xz        here: build and pack (after build/ is set up)
#   scripts/gpu_moe_run.sh KIT.tar.xz [gtest filter] [synth shape] [synth type]
#                                                 there: the tests, then, given a shape,
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
shape=${3:-}
type=${4:-}
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
[ -n "$shape" ] || exit $status
model=/tmp/$shape-$type.gguf
case $shape in gpt-oss*) vocab=arch/gptoss/gptoss.gguf ;; *) vocab=arch/qwen3moe/qwen3moe.gguf ;; esac
start=$(date +%s)
timeout 200 $loader "$k/ember" synth --shape "$shape" --type "$type" --vocab-from \
    "$k/fixtures/$vocab" -o "$model" -t 16 >/dev/null || { echo "synth failed"; exit $status; }
echo "synth: $(($(date +%s) - start)) s"
timeout 150 $loader "$k/ember" bench -m "$model" --gpu 0 -p 512 -n 64 --reps 2 --json \
    --no-bandwidth | tee "$out/bench.json"
exit $status
