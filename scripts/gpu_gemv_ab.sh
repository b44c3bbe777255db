#!/usr/bin/env bash
# The decode products' variants, timed against each other on the GPU machine in one call.
#
#   scripts/gpu_gemv_ab.sh pack   here: ember and test_gpu (stripped), their libraries, glibc's
#                                 loader and the Llama 3 vocabulary, as .gpukit/ab.tar.xz
#                                 (~20 MiB, no fixtures)
#   scripts/gpu_gemv_ab.sh run    there: the kernel tests (`*CudaQuant*`, no fixtures needed)
#                                 under each setting, then `ember bench --streams` on a synthetic
#                                 Llama-3.1-8B Q4_K_M under each setting in turn, $ROUNDS rounds
#
# A setting is an environment assignment, e.g. SETTINGS="EMBER_CUDA_MMA_GEMV=0
# EMBER_CUDA_MMA_GEMV=1" (the tensor-core gemv off and on); STREAMS (default 1,4,16) and
# ROUNDS (default 2). The device call carries [".gpukit/ab.tar.xz"].
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

pack() {
    local fixtures=${EMBER_FIXTURES_DIR:-../shared/fixtures} stage=.gpukit/ab-stage
    cmake -S . -B build >/dev/null
    flock /tmp/ember-build.lock cmake --build build -j2 --target ember test_gpu
    rm -rf "$stage" && mkdir -p "$stage/lib"
    strip -o "$stage/ember" build/app/ember
    strip -o "$stage/test_gpu" build/tests/test_gpu
    for bin in "$stage/ember" "$stage/test_gpu"; do
        ldd "$bin" | awk '/=> \// {print $3}' | grep -v -E 'libcuda|libcublas|libcudart' |
            xargs -r -I{} cp -L {} "$stage/lib/"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    scripts/gguf_vocab_only.py "$fixtures/arch/lfm2/lfm2.gguf" "$stage/llama3-vocab.gguf"
    tar -C "$stage" -cf - . | xz -6 -T2 >.gpukit/ab.tar.xz
    rm -rf "$stage"
    du -sh .gpukit/ab.tar.xz
}

run() {
    local out=${OUT:-/tmp/gpu_out} k=/tmp/abkit
    mkdir -p "$out" "$k"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        .gpukit/ab.tar.xz "$k"
    local cuda_lib
    cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -1)")
    local loader="$k/lib/ld-linux-x86-64.so.2 --library-path $k/lib:$cuda_lib"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local settings=${SETTINGS:-EMBER_CUDA_MMA_GEMV=0 EMBER_CUDA_MMA_GEMV=1} status=0
    for s in $settings; do
        env "$s" $loader "$k/test_gpu" --gtest_filter='*CudaQuant*' >"$out/test-$s.log" 2>&1 ||
            status=$?
        echo "$s: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/test-$s.log" | tr '\n' ' ')"
    done
    local model=/tmp/llama-3.1-8b-q4km.gguf
    [ -f "$model" ] || $loader "$k/ember" synth --shape llama-3.1-8b --type q4_k_m \
        --vocab-from "$k/llama3-vocab.gguf" -o "$model" -t 16 >/dev/null
    for round in $(seq "${ROUNDS:-2}"); do
        for s in $settings; do
            env "$s" $loader "$k/ember" bench -m "$model" --gpu 0 --streams "${STREAMS:-1,4,16}" \
                -p 128 -n 32 --reps 2 >"$out/streams-$s-$round.txt" 2>&1 || status=$?
            echo "round $round $s: $(grep streams "$out/streams-$s-$round.txt" |
                awk '{printf "%s:%s ms  ", $1, $5}')"
        done
    done
    return $status
}

case $mode in
    pack) pack ;;
    run) run ;;
    *) echo "usage: scripts/gpu_gemv_ab.sh pack | run" >&2; exit 2 ;;
esac
