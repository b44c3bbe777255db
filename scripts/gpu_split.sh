#!/usr/bin/env bash
# Models larger than the card (--gpu-layers, --gpu-memory) on a GPU machine: the split tests of
# test_gpu, then `ember bench` on a synthetic Llama-3.1-8B-shaped Q4_K_M file, whole on the GPU
# and capped by --gpu-memory so that it does not fit (as many layers as fit, the rest on the
# CPU), and on the CPU alone: decode tok/s against the fraction of layers on the GPU, and the
# peak device memory against the weights and KV rows there.
#
#   scripts/gpu_split.sh pack [DIR]   here: build ember and test_gpu, stage them stripped with
#                                     their libraries, the dense arch fixtures (and qwen3moe), a
#                                     Llama 3 vocabulary and this script into DIR/kit.tar.xz
#                                     (default .gpukit/split; carry DIR)
#   DIR/gpu_split.sh run [DIR]        there: the tests and the benches; logs and JSON in $OUT,
#                                     a table last. CAPS (default "3GiB 2GiB 1GiB") are the
#                                     --gpu-memory values; LAYERS (default none) --gpu-layers
#                                     counts run too; FILTER the tests; DEPTH (default 0)
#                                     the context before the timed decode (a full cache's KV);
#                                     CPU=0 skips the CPU-only run; FILTER=- the tests.
set -euo pipefail
mode=${1:-run}

pack() {
    local dir=${1:-.gpukit/split} fixtures=${EMBER_FIXTURES_DIR:-../shared/fixtures}
    cmake -S . -B build >/dev/null
    flock /tmp/ember-build.lock cmake --build build -j2 --target ember test_gpu
    local stage=$dir/stage
    rm -rf "$stage" "$dir/kit.tar.xz" && mkdir -p "$stage/lib" "$stage/fixtures"
    strip -o "$stage/ember" build/app/ember
    strip -o "$stage/test_gpu" build/tests/test_gpu
    for bin in "$stage/ember" "$stage/test_gpu"; do
        ldd "$bin" | awk '/=> \// {print $3}' | grep -v -E 'libcuda|libcublas|libcudart' |
            xargs -r -I{} cp -L {} "$stage/lib/"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    local files=("arch/gemma3/hf/config.json")
    for a in llama qwen2 qwen3 gemma3 qwen3moe; do files+=("arch/$a/$a.gguf" "arch/$a/ref.json"); done
    tar -C "$fixtures" -cf - "${files[@]}" | tar -C "$stage/fixtures" -xf -
    scripts/gguf_vocab_only.py "$fixtures/arch/lfm2/lfm2.gguf" "$stage/llama3-vocab.gguf"
    tar -C "$stage" -cf - . | xz -9e -T2 >"$dir/kit.tar.xz"
    rm -rf "$stage"
    cp "$0" "$dir/gpu_split.sh"
    du -sh "$dir/kit.tar.xz"
}

run() {
    local dir=${1:-.gpukit/split} out=${OUT:-/tmp/gpu_out} k=/tmp/splitkit
    mkdir -p "$out" "$k"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$dir/kit.tar.xz" "$k"
    local cuda_lib
    cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -1)")
    local loader="$k/lib/ld-linux-x86-64.so.2 --library-path $k/lib:$cuda_lib"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
    local status=0
    if [ "${FILTER:-}" != "-" ]; then  # FILTER=-: the benches alone
        EMBER_FIXTURES_DIR=$k/fixtures timeout 300 $loader "$k/test_gpu" \
            --gtest_filter="${FILTER:-*GpuSplit*:*GpuArch*:*GpuState*}" >"$out/test_gpu.log" 2>&1 ||
            status=$?
        grep -E '^\[  FAILED  \]|^\[(kv|gpu|split)\]|Failure|^\[==========\]|^\[  PASSED' \
            "$out/test_gpu.log" | head -120
    fi
    local model=/tmp/llama-3.1-8b-q4km.gguf
    [ -f "$model" ] || $loader "$k/ember" synth --shape llama-3.1-8b --type q4_k_m \
        --vocab-from "$k/llama3-vocab.gguf" -o "$model" -t 16 >/dev/null
    ls -la "$model"
    local bench=(bench -m "$model" -p "${PROMPT:-256}" -n 64 --reps "${REPS:-2}" -d "${DEPTH:-0}"
        --no-bandwidth --json)
    local runs=("whole:--gpu 0") cap
    for cap in ${CAPS-3GiB 2GiB 1GiB}; do runs+=("cap-$cap:--gpu 0 --gpu-memory $cap"); done
    for cap in ${LAYERS:-}; do runs+=("layers-$cap:--gpu 0 --gpu-layers $cap"); done
    [ "${CPU:-1}" = 0 ] || runs+=("cpu:--gpu-layers 0")
    local r name args
    for r in "${runs[@]}"; do
        name=${r%%:*} args=${r#*:}
        # shellcheck disable=SC2086
        $loader "$k/ember" "${bench[@]}" $args >"$out/bench-$name.json" 2>"$out/err" || status=$?
        echo "$name ($args): $(tr '\n' ' ' <"$out/err")" | tee -a "$out/bench.log"
    done
    rm -f "$out/err"
    python3 - "$out" <<'EOF' | tee -a "$out/bench.log"
import json, sys, glob, os
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json"))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, "unreadable", e); continue
    rows.append((os.path.basename(f)[6:-5], j))
    os.remove(f)  # one file back for all of them (a call brings back 8)
with open(os.path.join(sys.argv[1], "bench.jsonl"), "a") as out:
    for n, j in rows:
        out.write(json.dumps({"run": n, **j}) + "\n")
whole = next((j["decode_tps"] for n, j in rows if n == "whole"), None)
print("%-12s %9s %9s %10s %10s %9s %9s %9s %6s" % ("run", "layers", "decode", "vs whole",
      "prefill", "peak MiB", "wts MiB", "KV MiB", "peak/(w+kv)"))
for n, j in rows:
    layers = "%s/%s" % (j.get("gpu_layers", 0), j.get("n_layer", "-"))
    w, kv, peak = j.get("gpu_weight_mib", 0), j.get("gpu_kv_mib", 0), j.get("gpu_peak_mib", 0)
    print("%-12s %9s %9.2f %10.3f %10.1f %9.0f %9.0f %9.1f %6.3f" % (n, layers, j["decode_tps"],
          j["decode_tps"] / whole if whole else 0, j["prefill_tps"], peak, w, kv,
          peak / (w + kv) if w + kv else 0))
EOF
    return $status
}

case $mode in
    pack) pack "${2:-}" ;;
    run) run "${2:-}" ;;
    *) echo "usage: scripts/gpu_split.sh pack [DIR] | run [DIR]" >&2; exit 2 ;;
esac
