#!/usr/bin/env bash
# `ember serve` batching on the GPU machine (issue 40, item 4): `ember bench-serve --gpu 0` on a
# synthetic Llama-3.1-8B (Q4_K_M) at 1, 4 and 16 concurrent streams, then the same client load
# against the reference server (llama.cpp's llama-server, continuous batching on, 16 slots)
# built there from source as a measuring instrument.
#
#   scripts/gpu_serve.sh pack     here: the kit of scripts/gpu_resume.sh (ember, its libraries,
#                                 the Llama 3 vocabulary) and the reference server's source
#                                 (.gpuref/llama.cpp-server-src.tar.xz, from PyPI's
#                                 llama-cpp-python sdist, trimmed to what llama-server needs)
#   scripts/gpu_serve.sh run      there: synthesizes the file, runs both, JSON and logs in $OUT
#                                 and a table last. CLIENTS (default "1,4,16"), TOKENS (reply
#                                 length, default 128), EMBER_ARGS (more options for Ember's
#                                 bench-serve, e.g. --tensor-decode), REF=0 skips the reference (its CUDA
#                                 build takes ~5 minutes on 16 cores); a prebuilt
#                                 .gpuref/llama-server.xz (left in $OUT by an earlier run) is
#                                 used instead of building
#
# The device call carries [".gpukit/resume.tar.xz", ".gpuref/llama.cpp-server-src.tar.xz"].
set -euo pipefail
cd "$(dirname "$0")/.."
REF_VERSION=0.3.36 # llama-cpp-python, vendoring llama.cpp 0c1e57098bba (2026-10-01)
mode=${1:-}

pack() {
    scripts/gpu_resume.sh pack
    [ -f .gpuref/llama.cpp-server-src.tar.xz ] && return
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$REF_VERSION"
    tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-*.tar.gz
    local src=("$tmp"/llama_cpp_python-*/vendor/llama.cpp)
    # Only the server and what it builds on; the web UI is left out (an empty asset table).
    printf '%s\n' 'find_package(Threads REQUIRED)' 'llama_add_compile_flags()' \
        'add_subdirectory(mtmd)' 'add_subdirectory(ui)' 'add_subdirectory(server)' \
        >"$src/tools/CMakeLists.txt"
    mkdir -p .gpuref
    (cd "$src" &&
        tar --exclude='ggml/src/ggml-'{cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,virtgpu,zdnn,rpc,blas} \
            --exclude=tools/server/tests --exclude=tools/server/bench \
            -cf - CMakeLists.txt cmake ggml src include common vendor tools/CMakeLists.txt \
            tools/server tools/mtmd tools/ui/CMakeLists.txt tools/ui/ui.cpp.in tools/ui/ui.h.in \
            tools/ui/sources.cmake scripts/ui-assets.cmake LICENSE) |
        xz -6 -T2 >.gpuref/llama.cpp-server-src.tar.xz
    rm -rf "$tmp"
    du -sh .gpuref/llama.cpp-server-src.tar.xz
}

build_reference() {
    local out=$1 src=/tmp/llsrv/src
    if [ -f .gpuref/llama-server.xz ]; then
        xz -dc .gpuref/llama-server.xz >/tmp/llama-server && chmod +x /tmp/llama-server
        return
    fi
    rm -rf /tmp/llsrv && mkdir -p "$src"
    tar -C "$src" -xJf .gpuref/llama.cpp-server-src.tar.xz
    cmake -S "$src" -B /tmp/llsrv/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >/tmp/llsrv/configure.log
    local start=$SECONDS
    ninja -C /tmp/llsrv/build -j"$(nproc)" llama-server >/tmp/llsrv/build.log
    echo "reference server build: $((SECONDS - start)) s"
    strip -o /tmp/llama-server /tmp/llsrv/build/bin/llama-server
    xz -6 -T0 -c /tmp/llama-server >"$out/llama-server.xz"
}

run() {
    local out=${OUT:-/tmp/gpu_out} k=/tmp/servekit
    mkdir -p "$out" "$k"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        .gpukit/resume.tar.xz "$k"
    local cuda_lib
    cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH="$k/lib:$cuda_lib"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local model=/tmp/llama-3.1-8b-q4km.gguf clients=${CLIENTS:-1,4,16} tokens=${TOKENS:-128}
    [ -f "$model" ] || "$k/ember" synth --shape llama-3.1-8b --type q4_k_m \
        --vocab-from "$k/llama3-vocab.gguf" -o "$model" -t 16 >/dev/null
    # One turn per client, every reply `tokens` long: the decode steps dominate.
    local load=(--clients "$clients" --turns 1 --max-tokens "$tokens" --ignore-eos)
    # shellcheck disable=SC2086 # EMBER_ARGS: options of Ember's own run, word-split
    "$k/ember" bench-serve -m "$model" --gpu 0 --parallel 16 -c 2048 "${load[@]}" ${EMBER_ARGS:-} \
        >"$out/ember.json" 2>"$out/ember.log" || { tail -20 "$out/ember.log"; }
    if [ "${REF:-1}" != 0 ]; then
        build_reference "$out"
        # 16 slots of 2,048 tokens each, continuous batching (its default), f16 KV, all layers.
        /tmp/llama-server -m "$model" -ngl 99 -np 16 -c 32768 -fa on --port 8097 \
            --host 127.0.0.1 >"$out/ref-server.log" 2>&1 &
        local pid=$!
        for _ in $(seq 120); do
            python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:8097/health")' \
                2>/dev/null && break
            sleep 1
        done
        "$k/ember" bench-serve --url http://127.0.0.1:8097/v1 "${load[@]}" \
            >"$out/reference.json" 2>"$out/reference.log" || tail -20 "$out/reference.log"
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out = sys.argv[1]
for name in ("ember", "reference"):
    path = f"{out}/{name}.json"
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        print(f"{name}: no result")
        continue
    r = json.load(open(path))
    for run in r["runs"]:
        extra = ""
        if "mean_decode_batch" in run:
            extra = f", {run['decode_steps']} steps, mean batch {run['mean_decode_batch']:.2f}"
        print(f"{name:9} {run['clients']:>2} streams: {run['throughput_tokens_per_second']:8.1f}"
              f" tok/s ({run['throughput_vs_first_level']:.2f}x the first level), decode"
              f" {run['decode_tokens_per_second']:8.1f} tok/s ({run['decode_vs_first_level']:.2f}x),"
              f" ttft p50 {run['ttft_ms']['p50']:.0f} ms, errors {run['errors']}{extra}")
PY
}

case $mode in
    pack) pack ;;
    run) run ;;
    *) echo "usage: scripts/gpu_serve.sh pack | run" >&2; exit 2 ;;
esac
