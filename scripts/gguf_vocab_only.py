#!/usr/bin/env python3
"""Writes a GGUF that holds only the metadata of another (its tokenizer included), no tensors:
what `ember synth --vocab-from` reads, a few MiB instead of a whole model.
Usage: scripts/gguf_vocab_only.py SOURCE.gguf OUT.gguf"""
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
f = open(src, 'rb')
magic = f.read(4); ver, = struct.unpack('<I', f.read(4)); nt, nkv = struct.unpack('<QQ', f.read(16))
start = f.tell()
def skip_str(): n, = struct.unpack('<Q', f.read(8)); f.seek(n, 1)
sizes = {0:1,1:1,2:2,3:2,4:4,5:4,6:4,7:1,10:8,11:8,12:8}
def skip_val(t):
    if t == 8: skip_str(); return
    if t == 9:
        at, = struct.unpack('<I', f.read(4)); n, = struct.unpack('<Q', f.read(8))
        if at in sizes: f.seek(sizes[at] * n, 1)
        else:
            for _ in range(n): skip_val(at)
        return
    f.seek(sizes[t], 1)
for _ in range(nkv):
    skip_str(); t, = struct.unpack('<I', f.read(4)); skip_val(t)
end = f.tell(); f.seek(start); kv = f.read(end - start)
out = magic + struct.pack('<I', ver) + struct.pack('<QQ', 0, nkv) + kv
out += b'\0' * ((-len(out)) % 32)
open(dst, 'wb').write(out)
