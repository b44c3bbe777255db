#!/usr/bin/env bash
# Ember against the reference engine (llama.cpp) on the GPU machine, the two alternating in one
# run on the same synthetic files: the measurement issue 29's speed items ask for.
#
#   scripts/gpu_compare.sh pack              here: the bench kit (.gpukit/bench.tar.xz: ember,
#                                             its libraries, glibc's loader, the three
#                                             vocabularies synth copies) and the reference's source
#                                             (.gpuref/llama.cpp-src.tar.xz, from PyPI's
#                                             llama-cpp-python sdist, trimmed to what llama-bench
#                                             needs: ~2 MiB)
#   scripts/gpu_compare.sh build-ref         there: builds llama-bench for sm_90 (about 5 minutes
#                                             on 16 cores) and leaves it in $OUT as xz parts, to
#                                             carry back in .gpuref/ for the next call
#   scripts/gpu_compare.sh pack-ref DIR      here, instead of build-ref (saves the device's
#                                             minutes; ~40 on 2 cores): DIR is a CUDA build of the
#                                             same source (cmake -DGGML_CUDA=ON -DGGML_NATIVE=OFF
#                                             -DCMAKE_CUDA_ARCHITECTURES=90-real
#                                             -DBUILD_SHARED_LIBS=OFF, target llama-bench); its
#                                             binary, libraries and glibc's loader become
#                                             .gpuref/ref.tar.xz
#   scripts/gpu_compare.sh bench [shapes]    there: synthesizes the files and runs both engines
#                                             alternately (-p 512 -n 128, at depth 0 and 4096),
#                                             JSON in $OUT and a table of ratios last; shapes
#                                             default to qwen3-1.7b qwen3-4b llama-3.1-8b, types
#                                             to $TYPES (default "q4_k_m q8_0"), depths to
#                                             $DEPTHS (default "0 4096")
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
    scripts/gguf_vocab_only.py "$fixtures/arch/gptoss/gptoss.gguf" "$stage/o200k-vocab.gguf"
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

pack_ref() {
    local dir=${1:?usage: scripts/gpu_compare.sh pack-ref BUILD_DIR} stage=.gpuref/stage
    rm -rf "$stage" && mkdir -p "$stage/lib"
    strip -o "$stage/llama-bench" "$dir/bin/llama-bench"
    # Not NCCL (a CUDA build links it where it finds it: 208 MiB, past what a call carries): the
    # GPU machine has it with PyTorch (reference() adds that folder).
    ldd "$stage/llama-bench" | awk '/=> \// {print $3}' | grep -v -E 'libcuda|libcublas|libcudart|libnccl' |
        xargs -r -I{} cp -L {} "$stage/lib/"
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    tar -C "$stage" -cf - . | xz -9 -T2 >.gpuref/ref.tar.xz
    rm -rf "$stage"
    du -sh .gpuref/ref.tar.xz
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

# Runs the reference: the one built there (build-ref's parts) or the one packed here (pack-ref,
# with its loader and libraries).
reference() {
    if [ -d /tmp/refkit ]; then
        local nccl
        nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
        /tmp/refkit/lib/ld-linux-x86-64.so.2 --library-path "/tmp/refkit/lib:$CUDA_LIB${nccl:+:$nccl}" \
            /tmp/refkit/llama-bench "$@"
    else
        /tmp/llama-bench "$@"
    fi
}

bench() {
    local out=${OUT:?OUT names the folder that comes back}
    shift || true
    local shapes=("$@") types
    ((${#shapes[@]})) || shapes=(qwen3-1.7b qwen3-4b llama-3.1-8b)
    read -r -a types <<<"${TYPES:-q4_k_m q8_0}"
    KIT=/tmp/benchkit
    CUDA_LIB=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* | head -1)")
    rm -rf "$KIT" /tmp/refkit && mkdir -p "$KIT"
    tar -C "$KIT" -xJf .gpukit/bench.tar.xz
    if [ -f .gpuref/ref.tar.xz ]; then
        mkdir -p /tmp/refkit && tar -C /tmp/refkit -xJf .gpuref/ref.tar.xz
    else
        cat .gpuref/llama-bench.xz.part-* | xz -dc >/tmp/llama-bench && chmod +x /tmp/llama-bench
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
    for shape in "${shapes[@]}"; do
        for type in "${types[@]}"; do
            local vocab=$KIT/qwen3-vocab.gguf f=/tmp/$shape-$type.gguf
            [[ $shape == llama* ]] && vocab=$KIT/llama3-vocab.gguf
            [[ $shape == gpt-oss* ]] && vocab=$KIT/o200k-vocab.gguf
            ember synth --shape "$shape" --type "$type" --vocab-from "$vocab" -o "$f" \
                -t "$(nproc)" >/dev/null
            for depth in ${DEPTHS:-0 4096}; do
                for rep in $(seq "${REPS:-2}"); do  # alternating: ember, reference, ember, ...
                    ember bench -m "$f" --gpu 0 -p 512 -n 128 -d "$depth" --reps 3 --json \
                        >"$out/ember-$shape-$type-d$depth-$rep.json"
                    reference -m "$f" -ngl 99 -fa 1 -d "$depth" -p 512 -n 128 -r 3 -o json \
                        >"$out/ref-$shape-$type-d$depth-$rep.json" 2>/dev/null
                done
            done
            rm -f "$f"
        done
    done
    python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import glob, json, re, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/ember-*.json")):
    key = re.match(r".*/ember-(.+)-d(\d+)-\d+\.json", path)
    name, depth = key.group(1), int(key.group(2))
    e = json.load(open(path))
    r = json.load(open(path.replace("/ember-", "/ref-")))
    row = rows.setdefault((name, depth), {"pp": [], "tg": [], "rpp": [], "rtg": []})
    row["pp"].append(e["prefill_tps"])
    row["tg"].append(e["decode_tps"])
    row["rpp"] += [t["avg_ts"] for t in r if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0]
    row["rtg"] += [t["avg_ts"] for t in r if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0]
print(f"{'file':24} {'depth':>5} | {'prefill ember / ref':>22} {'ratio':>6} | {'decode ember / ref':>18} {'ratio':>6}")
for (name, depth), v in sorted(rows.items()):
    m = {k: statistics.median(x) if x else float("nan") for k, x in v.items()}
    print(f"{name:24} {depth:>5} | {m['pp']:>10,.0f} / {m['rpp']:>9,.0f} {m['pp'] / m['rpp']:>6.2f} |"
          f" {m['tg']:>7,.1f} / {m['rtg']:>7,.1f} {m['tg'] / m['rtg']:>6.2f}")
EOF
}

case $mode in
    pack) pack ;;
    build-ref) build_ref ;;
    pack-ref) pack_ref "${2:-}" ;;
    bench) bench "$@" ;;
    *) echo "usage: scripts/gpu_compare.sh pack | build-ref | pack-ref DIR | bench [shapes...]" >&2; exit 2 ;;
esac
