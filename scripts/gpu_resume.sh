#!/usr/bin/env bash
# Warm resume on the GPU machine (issue 40, item 3): `ember bench-resume` on a synthetic
# Llama-3.1-8B (Q4_K_M): a long conversation restored from the host tier in one serving process
# (--from memory), then a short and a long one restored across a process restart from the
# session database.
#
#   scripts/gpu_resume.sh pack     here: ember, its libraries, glibc's loader and the Llama 3
#                                  vocabulary synth copies, as .gpukit/resume.tar.xz (~10 MiB)
#   scripts/gpu_resume.sh run      there: synthesizes the file and runs bench-resume from
#                                  memory at $MEMORY_TOKENS (default 16000) and from the
#                                  database at $TOKENS (default "2000 16000"), JSON in $OUT
#
# The device call carries [".gpukit/resume.tar.xz"] (and extra files the command names).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

pack() {
    cmake -S . -B build >/dev/null
    flock /tmp/ember-build.lock cmake --build build -j2 --target ember
    local stage=.gpukit/resume-stage fixtures=${EMBER_FIXTURES_DIR:-../shared/fixtures}
    rm -rf "$stage" && mkdir -p "$stage/lib"
    strip -o "$stage/ember" build/app/ember
    # ember runs by itself there (bench-resume starts ember chat processes): the machine's own
    # glibc and loader, the kit's other libraries.
    ldd "$stage/ember" | awk '/=> \// {print $3}' |
        grep -v -E 'libcuda|libcublas|libcudart|libc\.so|libm\.so|libpthread|libdl|librt|ld-linux' |
        xargs -r -I{} cp -L {} "$stage/lib/"
    scripts/gguf_vocab_only.py "$fixtures/arch/lfm2/lfm2.gguf" "$stage/llama3-vocab.gguf"
    tar -C "$stage" -cf - . | xz -6 -T2 >.gpukit/resume.tar.xz
    rm -rf "$stage"
    du -sh .gpukit/resume.tar.xz
}

run() {
    local out=${OUT:-/tmp/gpu_out} k=/tmp/resumekit
    mkdir -p "$out" "$k"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        .gpukit/resume.tar.xz "$k"
    local cuda_lib
    cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH="$k/lib:$cuda_lib"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local model=/tmp/llama-3.1-8b-q4km.gguf
    [ -f "$model" ] || "$k/ember" synth --shape llama-3.1-8b --type q4_k_m \
        --vocab-from "$k/llama3-vocab.gguf" -o "$model" -t 16 >/dev/null
    # From the host tier: one serving process switches back to a conversation.
    for tokens in ${MEMORY_TOKENS:-16000}; do
        "$k/ember" bench-resume -m "$model" --gpu 0 --tokens "$tokens" --from memory \
            >"$out/resume-memory-$tokens.json" || true
        python3 - "$out/resume-memory-$tokens.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w, c = r["warm"], r["cold"]
print(f"memory, {r['conversation']['tokens']} tokens: warm {w['ttft_ms']:.1f} ms (engine"
      f" {w['engine_ttft_ms']:.1f}; {w['resume']} from {w['restored_from']}, {w['tokens_restored']}"
      f" restored), cold {c['ttft_ms']:.1f} ms (engine {c['engine_ttft_ms']:.1f}), ratio"
      f" {r['ttft_ratio']:.3f}, tier restore {r['restore']['raw_bytes']/1e6:.0f} MB in"
      f" {r['restore']['seconds']*1e3:.1f} ms, replies equal {r['replies_equal']}")
PY
    done
    for tokens in ${TOKENS:-2000 16000}; do
        "$k/ember" bench-resume -m "$model" --gpu 0 --tokens "$tokens" \
            --ctx $((tokens * 5 / 4 + 512)) --json >"$out/resume-$tokens.json" || true
        python3 - "$out/resume-$tokens.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w, c = r["warm"], r["cold"]
print(f"{r['conversation']['tokens']} tokens: warm {w['ttft_ms']:.1f} ms ({w['resume']}"
      f" from {w['restored_from']}), cold {c['ttft_ms']:.1f} ms, ratio {r['ttft_ratio']:.3f},"
      f" restore {r['restore']['raw_bytes']/1e6:.0f} MB in {r['restore']['seconds']*1e3:.1f} ms,"
      f" replies equal {r['replies_equal']}")
PY
    done
}

case $mode in
    pack) pack ;;
    run) run ;;
    *) echo "usage: scripts/gpu_resume.sh pack | run" >&2; exit 2 ;;
esac
