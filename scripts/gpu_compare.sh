#!/usr/bin/env bash
# Ember against the reference engine (llama.cpp) on the GPU machine, the two alternating in one
# run on the same synthetic files: the measurement issue 29's speed items ask for.
#
#   scripts/gpu_compare.sh pack              here: the bench kit (.gpukit/bench.tar.xz: ember,
#                                             its libraries, glibc's loader, the two vocabularies
#                                             synth copies) and the reference's source
#                                             (.gpuref/llama.cpp-src.tar.xz, from PyPI's
#                                             llama-cpp-python sdist, trimmed to what llama-bench
#                                             needs: ~2 MiB)
#   scripts/gpu_compare.sh build-ref         there: builds llama-bench for sm_90 (about 5 minutes
#                                             on 16 cores) and leaves it in $OUT as xz parts, to
#                                             carry back in .gpuref/ for the next call
#   scripts/gpu_compare.sh bench [shapes]    there: synthesizes the files and runs both engines
#                                             alternately (-p 512 -n 128 and 4096 deep), JSON in
#                                             $OUT; shapes default to qwen3-1.7b qwen3-4b llama-3.1-8b
#
# The device call carries [".gpukit", ".gpuref"]. The reference's code never enters the project:
# it is built under /tmp there as a measuring instrument.
set -euo pipefail
cd "$(dirname "$0")/.."
REF_VERSION=0.3.36  # llama-cpp-python, vendoring llama.cpp 0c1e57098bba (2026-10-01)
mode=${1:-}

pack() {
    cmake -S . -B build >/dev/null
    flock /tmp/ember-build.lock cmake --build build -j2 --target ember
    local stage=.gpukit/bench-stage fixtures=${EMBER_FIXTURES_DIR:-../shared/fixtures}
    rm -rf "$stage" && mkdir -p "$stage/lib"
    strip -o "$stage/ember" build/app/ember
    ldd "$stage/ember" | awk '/=> \// {print $3}' | grep -v -E 'libcuda|libcublas|libcudart' |
        xargs -r -I{} cp -L {} "$stage/lib/"
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    scripts/gguf_vocab_only.py "$fixtures/arch/qwen3/qwen3.gguf" "$stage/qwen3-vocab.gguf"
    scripts/gguf_vocab_only.py "$fixtures/arch/lfm2/lfm2.gguf" "$stage/llama3-vocab.gguf"
    tar -C "$stage" -cf - . | xz -9e -T2 >.gpukit/bench.tar.xz  # -9e: it travels beside llama-bench
    rm -rf "$stage"
    if [ ! -f .gpuref/llama.cpp-src.tar.xz ]; then
        local tmp
        tmp=$(mktemp -d)
        python3 -m pip download --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$REF_VERSION"
        tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-*.tar.gz
        mkdir -p .gpuref
        (cd "$tmp"/llama_cpp_python-*/vendor/llama.cpp &&
            tar --exclude='ggml/src/ggml-'{cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,virtgpu,zdnn,rpc,blas} \
                -cf - CMakeLists.txt cmake ggml src include common vendor tools/CMakeLists.txt \
                tools/llama-bench LICENSE) | xz -6 -T2 >.gpuref/llama.cpp-src.tar.xz
        rm -rf "$tmp"
    fi
    du -sh .gpukit/bench.tar.xz .gpuref/*
}

build_ref() {
    local out=${OUT:?OUT names the folder that comes back} src=/tmp/llref/src
    rm -rf /tmp/llref && mkdir -p "$src"
    tar -C "$src" -xJf .gpuref/llama.cpp-src.tar.xz
    echo 'add_subdirectory(llama-bench)' >"$src/tools/CMakeLists.txt"  # only what was carried
    cmake -S "$src" -B /tmp/llref/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >/tmp/llref/configure.log
    local start=$SECONDS
    ninja -C /tmp/llref/build -j"$(nproc)" llama-bench >/tmp/llref/build.log
    echo "reference build: $((SECONDS - start)) s"
    strip -o /tmp/llref/llama-bench /tmp/llref/build/bin/llama-bench
    xz -6 -T0 -c /tmp/llref/llama-bench | split -b 15M - "$out/llama-bench.xz.part-"
    ls -la "$out"
}

# Runs the kit's ember: glibc's loader and the kit's libraries, the machine's CUDA ones.
ember() {
    "$KIT/lib/ld-linux-x86-64.so.2" --library-path "$KIT/lib:$CUDA_LIB" "$KIT/ember" "$@"
}

bench() {
    local out=${OUT:?OUT names the folder that comes back}
    shift || true
    local shapes=("$@")
    ((${#shapes[@]})) || shapes=(qwen3-1.7b qwen3-4b llama-3.1-8b)
    KIT=/tmp/benchkit
    CUDA_LIB=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* | head -1)")
    rm -rf "$KIT" && mkdir -p "$KIT"
    tar -C "$KIT" -xJf .gpukit/bench.tar.xz
    cat .gpuref/llama-bench.xz.part-* | xz -dc >/tmp/llama-bench && chmod +x /tmp/llama-bench
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
    for shape in "${shapes[@]}"; do
        local vocab=$KIT/qwen3-vocab.gguf
        [[ $shape == llama* ]] && vocab=$KIT/llama3-vocab.gguf
        ember synth --shape "$shape" --type q4_k_m --vocab-from "$vocab" -o "/tmp/$shape.gguf" \
            -t "$(nproc)" >/dev/null
    done
    for shape in "${shapes[@]}"; do
        local f=/tmp/$shape.gguf
        for rep in 1 2; do  # alternating: ember, reference, ember, reference
            ember bench -m "$f" --gpu 0 -p 512 -n 128 --reps 3 --json >"$out/ember-$shape-$rep.json"
            /tmp/llama-bench -m "$f" -ngl 99 -p 512 -n 128 -r 3 -o json >"$out/ref-$shape-$rep.json" 2>/dev/null
            ember bench -m "$f" --gpu 0 -p 512 -n 128 -d 4096 --reps 3 --json >"$out/ember-$shape-d4096-$rep.json"
            /tmp/llama-bench -m "$f" -ngl 99 -fa 1 -d 4096 -p 512 -n 128 -r 3 -o json >"$out/ref-$shape-d4096-$rep.json" 2>/dev/null
        done
    done
    python3 - "$out" "${shapes[@]}" <<'EOF' | tee "$out/summary.txt"
import json, sys, glob
out, shapes = sys.argv[1], sys.argv[2:]
for shape in shapes:
    for depth in ("", "-d4096"):
        e = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/ember-{shape}{depth}-[0-9].json"))]
        r = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/ref-{shape}{depth}-[0-9].json"))]
        print(shape, depth or "-d0", "ember:", [(round(x["prefill_tps"], 1), round(x["decode_tps"], 1)) for x in e])
        print(shape, depth or "-d0", "ref:", [ [(t.get("n_prompt"), t.get("n_gen"), round(t.get("avg_ts", 0), 1)) for t in x] for x in r ])
EOF
}

case $mode in
    pack) pack ;;
    build-ref) build_ref ;;
    bench) bench "$@" ;;
    *) echo "usage: scripts/gpu_compare.sh pack | build-ref | bench [shapes...]" >&2; exit 2 ;;
esac
