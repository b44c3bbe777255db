#!/usr/bin/env python3
"""Carry a real GGUF file's speed to a machine it cannot travel to whole.

  gguf_skeleton.py pack MODEL.gguf SKELETON [--cap BYTES]
  gguf_skeleton.py expand SKELETON MODEL.gguf

`pack` writes the file's header (metadata, tokenizer, tensor table) verbatim and, of each tensor,
only its first rows (at most --cap bytes, whole rows, at least one). `expand` rebuilds a file of
the original's exact size and layout: header as it was, every tensor filled by repeating its
carried rows. Same types, shapes, tokenizer and template, so a benchmark of the expanded file
measures what one of the original would (the values repeat; speed does not depend on them); the
numbers it computes are of course not the model's. Used to benchmark the real default models on
the device machine, whose uploads are capped (scripts/device_real_bench.sh).
"""
import argparse
import json
import struct
import sys

# GGUF tensor type -> (elements per block, bytes per block), for the types real files use.
TYPE_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    20: (32, 18), 23: (256, 136), 30: (1, 2), 39: (32, 17),
}
# GGUF metadata value type -> fixed size in bytes (strings and arrays are read separately).
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
MAGIC = 0x46554747  # "GGUF"


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "replace")

    def skip_value(self, vtype):
        if vtype == 8:
            self.string()
        elif vtype == 9:
            etype, count = self.take("I"), self.take("Q")
            if etype in SCALAR_SIZES:
                self.pos += SCALAR_SIZES[etype] * count
            else:
                for _ in range(count):
                    self.skip_value(etype)
        elif vtype in SCALAR_SIZES:
            self.pos += SCALAR_SIZES[vtype]
        else:
            raise ValueError(f"unknown metadata type {vtype} at byte {self.pos}")


def read_layout(data):
    """Header length and the tensors (name, type, byte offset in the data section, bytes, rows)."""
    r = Reader(data)
    if r.take("I") != MAGIC:
        raise ValueError("not a GGUF file")
    version = r.take("I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is not supported")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("I")
        if key == "general.alignment" and vtype == 4:
            alignment = r.take("I")
        else:
            r.skip_value(vtype)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        ttype, offset = r.take("I"), r.take("Q")
        if ttype not in TYPE_BLOCKS:
            raise ValueError(f"{name}: tensor type {ttype} is not in this script's table")
        elems, block = TYPE_BLOCKS[ttype]
        rows = 1
        for d in dims[1:]:
            rows *= d
        row_bytes = dims[0] // elems * block
        tensors.append(dict(name=name, offset=offset, bytes=row_bytes * rows, row_bytes=row_bytes))
    header = (r.pos + alignment - 1) // alignment * alignment
    return header, tensors


def pack(model, out, cap):
    data = open(model, "rb").read()
    header, tensors = read_layout(data)
    chunks = []
    for t in tensors:
        rows = max(1, min(cap, t["bytes"]) // t["row_bytes"])
        start = header + t["offset"]
        chunks.append(data[start:start + rows * t["row_bytes"]])
        t["carried"] = rows * t["row_bytes"]
    meta = json.dumps(dict(size=len(data), header=header, tensors=tensors)).encode()
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(meta)))
        f.write(meta)
        f.write(data[:header])
        for c in chunks:
            f.write(c)


def expand(skeleton, out):
    blob = open(skeleton, "rb").read()
    n = struct.unpack_from("<Q", blob, 0)[0]
    meta = json.loads(blob[8:8 + n])
    pos = 8 + n
    full = bytearray(meta["size"])
    full[:meta["header"]] = blob[pos:pos + meta["header"]]
    pos += meta["header"]
    for t in meta["tensors"]:
        chunk = blob[pos:pos + t["carried"]]
        pos += t["carried"]
        start = meta["header"] + t["offset"]
        reps = -(-t["bytes"] // len(chunk))
        full[start:start + t["bytes"]] = (chunk * reps)[:t["bytes"]]
    with open(out, "wb") as f:
        f.write(full)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("model")
    p.add_argument("skeleton")
    p.add_argument("--cap", type=int, default=48 * 1024, help="bytes carried per tensor")
    e = sub.add_parser("expand")
    e.add_argument("skeleton")
    e.add_argument("model")
    a = ap.parse_args()
    try:
        if a.cmd == "pack":
            pack(a.model, a.skeleton, a.cap)
        else:
            expand(a.skeleton, a.model)
    except (OSError, ValueError, KeyError) as err:
        print(f"gguf_skeleton: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
