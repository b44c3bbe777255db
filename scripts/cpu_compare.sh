#!/usr/bin/env bash
# Ember against the reference engine (llama.cpp's llama-bench) on the CPU, on real model files,
# at each SIMD level both support, idle and under load: the measurement issue 38's speed item
# asks for. Runs here or on the device machine's 16 cores, whose uploads are capped (64 MiB):
# the models travel as skeletons (scripts/gguf_skeleton.py: header verbatim, each tensor's first
# rows, expanded there to a file of the same layout).
#
#   scripts/cpu_compare.sh pack MODEL.gguf...   here: .devkit/cpu.tar.xz holding ember (this
#                                               build, stripped), llama-bench built for AVX-512
#                                               and for AVX2 (REF512, REF2: their bin/ folders,
#                                               built from PyPI's llama-cpp-python 0.3.36 sdist
#                                               under /tmp, see the note below), the libraries and
#                                               glibc's loader, and the models' skeletons
#   scripts/cpu_compare.sh bench [CONFIG...]    there (the call carries .devkit): JSON lines in
#                                               $OUT/cpu_compare.jsonl, a table on stdout
#
# CONFIG is LEVEL:THREADS:LOAD, LEVEL avx512|avx2, LOAD idle|busy (busy: one spinning process per
# core beside the engines, on the same cores); default: every level at 2 threads idle and busy,
# and at 16 threads idle. Each engine is pinned (taskset) to the first THREADS physical cores;
# the two engines alternate, ROUNDS (2) times per configuration, -p PROMPT (512) -n GEN (64).
# Ember's level is forced with EMBER_KERNELS; the reference runs its build for that level, with
# its default spin-waiting (--poll 50) and, under load, also with passive waiting (--poll 0).
#
# The reference engine: `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`,
# cmake its vendor/llama.cpp with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# and, for AVX-512, -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
# -DGGML_AVX512_VBMI=ON (AMX off), Release, `--target llama-bench`. Its code never enters the
# project.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true

pack() {
    local ref512=${REF512:-/tmp/ref512/bin} ref2=${REF2:-/tmp/ref2/bin}
    local ember=${EMBER:-build/app/ember} stage=.devkit/cpu-stage
    [ $# -ge 1 ] || { echo "cpu_compare: pack needs the model files" >&2; exit 2; }
    rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/ref512" "$stage/ref2" "$stage/models"
    strip -o "$stage/ember" "$ember"
    for dir in "$ref512" "$ref2"; do
        local dest=$stage/ref512
        [ "$dir" = "$ref2" ] && dest=$stage/ref2
        strip -o "$dest/llama-bench" "$dir/llama-bench"
        for lib in "$dir"/lib*.so*; do
            [ -L "$lib" ] && continue
            strip -o "$dest/$(basename "$lib")" "$lib"
        done
        # The sonames the loader asks for (libllama.so.0 for libllama.so.0.5.0, ...).
        for link in "$dir"/lib*.so.*; do
            [ -L "$link" ] && ln -sf "$(basename "$(readlink -f "$link")")" "$dest/$(basename "$link")"
        done
    done
    { ldd "$stage/ember"; ldd "$ref512/llama-bench"; } | awk '/=> \// {print $3}' |
        grep -v -E 'libcuda|libcublas|libcudart|/tmp/' | sort -u | xargs -r -I{} cp -L {} "$stage/lib/"
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
    cp scripts/gguf_skeleton.py "$stage/"
    for m in "$@"; do
        python3 scripts/gguf_skeleton.py pack "$m" "$stage/models/$(basename "$m" .gguf).skel"
    done
    tar -C "$stage" -cf - . | xz -6 -T2 >.devkit/cpu.tar.xz
    rm -rf "$stage"
    du -sh .devkit/cpu.tar.xz
}

physical_cores() {
    python3 - <<'PY'
import glob, re
seen, out = set(), []
for p in sorted(glob.glob('/sys/devices/system/cpu/cpu[0-9]*'), key=lambda s: int(re.findall(r'\d+$', s)[0])):
    try:
        key = (open(p + '/topology/physical_package_id').read(), open(p + '/topology/core_id').read())
    except OSError:
        continue
    if key not in seen:
        seen.add(key)
        out.append(re.findall(r'\d+$', p)[0])
print(' '.join(out))
PY
}

bench() {
    local out=${OUT:-/tmp/cpu_compare} kit=/tmp/cpukit rounds=${ROUNDS:-2} p=${PROMPT:-512}
    local n=${GEN:-64}
    mkdir -p "$out" && rm -rf "$kit" && mkdir -p "$kit"
    tar -C "$kit" -xJf .devkit/cpu.tar.xz
    local ld="$kit/lib/ld-linux-x86-64.so.2"
    for s in "$kit"/models/*.skel; do
        python3 "$kit/gguf_skeleton.py" expand "$s" "${s%.skel}.gguf"
    done
    local configs=("$@")
    ((${#configs[@]})) || configs=(avx512:2:idle avx2:2:idle avx512:2:busy avx2:2:busy
                                   avx512:16:idle avx2:16:idle)
    local cores
    read -r -a cores <<<"$(physical_cores)"
    lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200 | tee "$out/cpu.txt"
    local res=$out/cpu_compare.jsonl
    for cfg in "${configs[@]}"; do
        IFS=: read -r level threads load <<<"$cfg"
        local cpus
        cpus=$(printf '%s\n' "${cores[@]:0:$threads}" | paste -sd,)
        local spinners=()
        if [ "$load" = busy ]; then
            for c in ${cpus//,/ }; do
                taskset -c "$c" sh -c 'while :; do :; done' &
                spinners+=($!)
            done
        fi
        local polls=(50)
        [ "$load" = busy ] && polls=(50 0)
        for m in "$kit"/models/*.gguf; do
            for ((r = 0; r < rounds; r++)); do
                local e
                e=$(EMBER_KERNELS=$level taskset -c "$cpus" "$ld" --library-path "$kit/lib" \
                    "$kit/ember" bench -m "$m" -t "$threads" -p "$p" -n "$n" --reps 1 --json 2>/dev/null) || e='{}'
                for poll in "${polls[@]}"; do
                    local refdir=$kit/ref512
                    [ "$level" = avx2 ] && refdir=$kit/ref2
                    local rj
                    rj=$(taskset -c "$cpus" "$ld" --library-path "$refdir:$kit/lib" \
                        "$refdir/llama-bench" -m "$m" -t "$threads" -p "$p" -n "$n" -r 1 \
                        --poll "$poll" -o json 2>/dev/null) || rj='[]'
                    python3 - "$(basename "$m")" "$level" "$threads" "$load" "$poll" "$r" "$e" \
                        "$rj" >>"$res" <<'PY'
import json, sys
model, level, threads, load, poll, rnd, e, r = sys.argv[1:9]
e = json.loads(e); r = json.loads(r)
pp = next((x["avg_ts"] for x in r if x["n_prompt"] > 0 and x["n_gen"] == 0), None)
tg = next((x["avg_ts"] for x in r if x["n_gen"] > 0 and x["n_prompt"] == 0), None)
print(json.dumps(dict(model=model, level=level, threads=int(threads), load=load, ref_poll=int(poll),
                      round=int(rnd), ember_prefill=e.get("prefill_tps"), ref_prefill=pp,
                      ember_decode=e.get("decode_tps"), ref_decode=tg,
                      ember_activations=e.get("activations"), ember_isa=e.get("isa"))))
PY
                    tail -1 "$res"
                done
            done
        done
        if ((${#spinners[@]})); then kill "${spinners[@]}" 2>/dev/null || true; fi
        wait 2>/dev/null || true
    done
    python3 - "$res" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = defaultdict(list)
for x in rows:
    groups[(x["model"], x["level"], x["threads"], x["load"], x["ref_poll"])].append(x)
print("model | level | threads | load | ref poll | prefill Ember / ref (ratio) | decode Ember / ref (ratio)")
for k, xs in groups.items():
    def med(f):
        v = [x[f] for x in xs if x[f] is not None]
        return statistics.median(v) if v else float("nan")
    ep, rp, ed, rd = med("ember_prefill"), med("ref_prefill"), med("ember_decode"), med("ref_decode")
    print(f"{k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {ep:.0f} / {rp:.0f} ({ep / rp:.2f}) | "
          f"{ed:.1f} / {rd:.1f} ({ed / rd:.2f})")
PY
}

case $mode in
    pack) pack "$@" ;;
    bench) bench "$@" ;;
    *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
