#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF reader fuzzer (fuzz/corpus/gguf/):
small valid files covering every metadata type, string and nested arrays,
both versions, custom alignment, a LLaMA-style configuration, and tensors of
every type the library computes with plus one it only sizes (IQ4_NL).

Standalone (struct only), so the corpus can be rebuilt anywhere:
    python3 fuzz/make_gguf_corpus.py [output_dir]
"""

import os
import random
import struct
import sys

MAGIC, ALIGN = 0x46554747, 32
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FIXED = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
         I64: "<q", F64: "<d"}
# ggml type id -> (weights per block, bytes per block)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144),
         13: (256, 176), 14: (256, 210), 15: (256, 292), 20: (32, 18), 30: (1, 2)}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STRING:
        return s(v)
    if vtype == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(FIXED[vtype], v)


def gguf(kvs, tensors, version=3, align=ALIGN, rng=None):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type, dims)]."""
    rng = rng or random.Random(0)
    head = struct.pack("<IIQQ", MAGIC, version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += s(key) + struct.pack("<I", vtype) + value(vtype, v)
    data, offset = b"", 0
    for name, ttype, dims in tensors:
        be, bb = TYPES[ttype]
        n = 1
        for d in dims[1:]:
            n *= d
        nbytes = (dims[0] if dims else 1) // be * bb * n
        offset = (offset + align - 1) // align * align
        head += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ttype, offset)
        data = data.ljust(offset, b"\0") + bytes(rng.randrange(256) for _ in range(nbytes))
        offset += nbytes
    head = head.ljust((len(head) + align - 1) // align * align, b"\0") if tensors else head
    return head + data


def llama_kvs(arch="llama"):
    return [("general.architecture", STRING, arch), (arch + ".context_length", U32, 2048),
            (arch + ".embedding_length", U32, 64), (arch + ".block_count", U32, 2),
            (arch + ".feed_forward_length", U32, 172), (arch + ".attention.head_count", U32, 4),
            (arch + ".attention.head_count_kv", U32, 2), (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-6),
            (arch + ".rope.freq_base", F32, 10000.0), ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "a", "b"])),
            ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, -1.0, -2.0]))]


def seeds():
    every_scalar = [("k%d" % t, t, v) for t, v in [(U8, 200), (I8, -3), (U16, 60000), (I16, -300), (U32, 7),
                                                   (I32, -7), (F32, 0.5), (BOOL, True), (U64, 2**64 - 1),
                                                   (I64, -2**63), (F64, 2.5)]]
    every_scalar.append(("kstr", STRING, "hello"))
    arrays = [("a%d" % t, ARRAY, (t, [v, v])) for t, v in [(U8, 1), (I16, -2), (F32, 1.5), (U64, 9), (BOOL, False)]]
    arrays += [("astr", ARRAY, (STRING, ["x", "", "yz"])),
               ("anest", ARRAY, (ARRAY, [(I32, [1, 2]), (I32, []), (STRING, ["deep"])])),
               ("adeep", ARRAY, (ARRAY, [(ARRAY, [(ARRAY, [(U8, [1])])])]))]
    yield "empty", gguf([], [])
    yield "scalars", gguf(every_scalar, [])
    yield "arrays", gguf(arrays, [])
    yield "v2", gguf(every_scalar[:3], [("t", 0, [8])], version=2)
    yield "aligned64", gguf([("general.alignment", U32, 64)] + arrays[:2], [("a", 2, [64, 2]), ("b", 1, [5])],
                            align=64)
    yield "llama", gguf(llama_kvs(), [("token_embd.weight", 2, [64, 3]), ("blk.0.attn_q.weight", 12, [256, 4]),
                                      ("output_norm.weight", 0, [64])])
    yield "mistral", gguf(llama_kvs("mistral"), [("blk.0.ffn_down.weight", 14, [256, 2])])
    yield "all_types", gguf([("general.architecture", STRING, "llama")],
                            [("t%d" % t, t, [256, 2]) for t in sorted(TYPES)] + [("scalar", 0, []), ("zero", 1, [0])])
    yield "k_quants", gguf([], [("q4k", 12, [512, 1]), ("q5k", 13, [256, 2]), ("q6k", 14, [256, 1]),
                                ("q8k", 15, [256, 1])])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                                                              "gguf")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
        print("%-10s %6d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
