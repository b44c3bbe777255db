#!/usr/bin/env python3
"""Copies a GGUF's header and metadata and drops its tensors: a vocabulary-only file small enough
to carry to the device machine as `ember synth --vocab-from`. Usage: vocab_only_gguf.py SRC DST"""
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read()
magic, ver, nt, nkv = struct.unpack_from('<IIQQ', b, 0)
off = 24
SIZES = {0:1,1:1,2:2,3:2,4:4,5:4,6:4,7:1,10:8,11:8,12:8}
def skip_val(t, off):
    if t in SIZES: return off + SIZES[t]
    if t == 8:
        n, = struct.unpack_from('<Q', b, off); return off + 8 + n
    if t == 9:
        et, n = struct.unpack_from('<IQ', b, off); off += 12
        for _ in range(n): off = skip_val(et, off)
        return off
    raise SystemExit('type %d' % t)
for _ in range(nkv):
    n, = struct.unpack_from('<Q', b, off); off += 8 + n
    t, = struct.unpack_from('<I', b, off); off += 4
    off = skip_val(t, off)
out = struct.pack('<IIQQ', magic, ver, 0, nkv) + b[24:off]
out += b'\0' * ((-len(out)) % 32)
open(dst, 'wb').write(out)
