#!/bin/bash
# Builds a seed corpus and runs fuzz_gguf for a while.
#   tests/fuzz/run_fuzz_gguf.sh <build dir with fuzz_gguf> [seconds=60] [extra libFuzzer args]
# Seeds: the first 64 KiB of every fixture GGUF (header, metadata and usually the tensor table)
# and a few small complete files written here. Findings land in <build dir>/fuzz-findings/.
set -euo pipefail
build=${1:?build dir}
secs=${2:-60}
shift $(($# >= 2 ? 2 : $#))
here=$(cd "$(dirname "$0")" && pwd)
fixtures=${EMBER_FIXTURES_DIR:-$here/../../../shared/fixtures}
corpus=$build/fuzz-corpus/gguf
findings=$build/fuzz-findings
mkdir -p "$corpus" "$findings"

if [ -d "$fixtures" ]; then
    find "$fixtures" -name '*.gguf' | while read -r f; do
        name=$(echo "${f#$fixtures/}" | tr '/' '_')
        head -c 65536 "$f" > "$corpus/seed_$name"
    done
fi
python3 - "$corpus" <<'PY'
import struct, sys, os
out = sys.argv[1]
def s(x): x = x.encode(); return struct.pack('<Q', len(x)) + x
def kv(k, t, payload): return s(k) + struct.pack('<I', t) + payload
def gguf(kvs, tensors, align=32, version=3):
    h = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    data, off, infos = b'', 0, b''
    for name, dims, typ, raw in tensors:
        infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        infos += struct.pack('<IQ', typ, off)
        data += raw + b'\0' * (-len(raw) % align)
        off = len(data)
    body = h + infos
    body += b'\0' * (-len(body) % align)
    return body + data
kvs = [kv('general.architecture', 8, s('llama')),
       kv('u8', 0, b'\x07'), kv('i16', 3, struct.pack('<h', -5)), kv('f64', 12, struct.pack('<d', .5)),
       kv('flag', 7, b'\x01'), kv('u64', 10, struct.pack('<Q', 1 << 40)),
       kv('tokens', 9, struct.pack('<IQ', 8, 3) + s('a') + s('b') + s('ab')),
       kv('scores', 9, struct.pack('<IQ', 6, 2) + struct.pack('<ff', 1, 2)),
       kv('nest', 9, struct.pack('<IQ', 9, 1) + struct.pack('<IQ', 4, 1) + struct.pack('<I', 9))]
tensors = [('a', [4, 2], 0, bytes(32)), ('b', [32], 2, bytes(18)), ('c', [256], 12, bytes(144)),
           ('d', [3], 30, bytes(6))]
open(os.path.join(out, 'gen_small.gguf'), 'wb').write(gguf(kvs, tensors))
open(os.path.join(out, 'gen_v2.gguf'), 'wb').write(gguf(kvs[:3], tensors[:2], version=2))
open(os.path.join(out, 'gen_align64.gguf'), 'wb').write(
    gguf([kv('general.alignment', 4, struct.pack('<I', 64))] + kvs[:2], tensors, align=64))
# A mixture-of-experts layer (qwen3moe): expert counts in the metadata, 3-D stacked experts
# [cols, rows, n_expert] of Q8_0 and an F32 router (the fixture's own header is all vocabulary).
u32 = lambda k, v: kv(k, 4, struct.pack('<I', v))
moe_kvs = [kv('general.architecture', 8, s('qwen3moe')), u32('qwen3moe.expert_count', 4),
           u32('qwen3moe.expert_used_count', 2), u32('qwen3moe.expert_feed_forward_length', 32),
           u32('qwen3moe.embedding_length', 32)]
moe_tensors = [('blk.0.ffn_gate_inp.weight', [32, 4], 0, bytes(512)),
               ('blk.0.ffn_gate_exps.weight', [32, 32, 4], 8, bytes(34 * 32 * 4)),
               ('blk.0.ffn_down_exps.weight', [32, 32, 4], 8, bytes(34 * 32 * 4))]
open(os.path.join(out, 'gen_moe.gguf'), 'wb').write(gguf(moe_kvs, moe_tensors))
# gemma3: a sliding window, a per-layer sliding pattern (bool array), linear RoPE scaling and
# the post-norms, which the fixture's 64 KiB head (all vocabulary) never reaches.
f32 = lambda k, v: kv(k, 6, struct.pack('<f', v))
gemma_kvs = [kv('general.architecture', 8, s('gemma3')), u32('gemma3.attention.sliding_window', 512),
             kv('gemma3.attention.sliding_window_pattern', 9, struct.pack('<IQ', 7, 3) + b'\x01\x01\x00'),
             kv('gemma3.rope.scaling.type', 8, s('linear')), f32('gemma3.rope.scaling.factor', 8.0),
             u32('gemma3.embedding_length', 32)]
gemma_tensors = [('blk.0.post_attention_norm.weight', [32], 0, bytes(128)),
                 ('blk.0.post_ffw_norm.weight', [32], 0, bytes(128)),
                 ('blk.0.attn_q.weight', [256, 2], 12, bytes(2 * 144))]
open(os.path.join(out, 'gen_gemma3.gguf'), 'wb').write(gguf(gemma_kvs, gemma_tensors))
PY

echo "seeds: $(ls "$corpus" | wc -l) files in $corpus"
"$build/tests/fuzz/fuzz_gguf" "$corpus" -dict="$here/gguf.dict" -max_total_time="$secs" \
    -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$@"
