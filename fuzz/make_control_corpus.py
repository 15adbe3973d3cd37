#!/usr/bin/env python3
"""Writes the seed corpora of the control-connection fuzzers
(fuzz/corpus/{frame,control_server,handshake}/): well-formed frames, plain
and with a valid session MAC, store and remote-endpoint requests of every
kind, and both sides' handshake messages. The first byte of each seed is
the target's mode byte (see the fuzz/*_fuzz.cpp headers).

Standalone (hashlib and hmac only):
    python3 fuzz/make_control_corpus.py [corpus_dir]
"""

import hashlib
import hmac
import os
import struct
import sys


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def sealed(payload, seq, key=b"k" * 32, direction=b"c"):
    """A frame as a session with key `key` sends it (auth.h)."""
    mac = hmac.new(key, direction + struct.pack("<Q", seq) + hashlib.sha256(payload).digest(), hashlib.sha256).digest()
    return frame(payload + mac)


def store_request(op, key, value=b""):
    return op + struct.pack("<I", len(key)) + key + value


def hello(mode, purpose, rank):
    return frame(b"TCAUTH02" + bytes([mode, purpose]) + struct.pack("<Q", rank & 0xFFFFFFFF) + b"\0" * 32)


def proof(identity, key_id, mac=b"\0" * 32):
    return frame(b"A" + bytes([len(identity)]) + identity + struct.pack("<Q", key_id) + mac)


def seeds():
    requests = [store_request(b"S", b"1", b"127.0.0.1:4000"), store_request(b"G", b"0"),
                store_request(b"S", b"1/extra", b"x" * 100), store_request(b"S", b"tc/nccl_unique_id", b"forged")]
    yield "frame", "plain", bytes([0b00100]) + b"".join(frame(r) for r in requests)
    yield "frame", "plain_net", bytes([0b10100]) + b"".join(frame(r) for r in requests)
    yield "frame", "sealed", bytes([0b00101]) + b"".join(sealed(r, i) for i, r in enumerate(requests))
    yield "frame", "two_step", bytes([0b01011]) + b"".join(sealed(r, i) for i, r in enumerate(requests))
    yield "frame", "round_trip", b"\xff" + b"|".join(requests)
    yield "control_server", "store", b"\0" + b"".join(frame(r) for r in requests)
    big = store_request(b"S", b"1/big", b"v" * 8192)
    yield "control_server", "store_bound", b"\0" + frame(big) + frame(store_request(b"G", b"1/big"))
    yield "control_server", "store_rank2", b"\x80" + frame(store_request(b"S", b"2", b"a")) + frame(store_request(b"S", b"1", b"b"))
    yield "control_server", "store_raw", b"\x02" + hello(0, 1, 1) + frame(requests[0])
    fetch = lambda n, name: frame(b"F" + struct.pack("<Q", n) + name)
    yield "control_server", "remote", b"\x01" + fetch(64, b"w") + fetch(8, b"w") + fetch(1, b"absent")
    yield "handshake", "server_plain", b"\0" + hello(0, 1, 1)
    yield "handshake", "server_keyed", b"\x02" + hello(1, 1, 1) + proof(b"rank1", 1)
    yield "handshake", "server_unknown_key", b"\x02" + hello(1, 1, 2) + proof(b"stranger", 9)
    yield "handshake", "client_plain", b"\x01" + frame(b"P")
    yield "handshake", "client_keyed", b"\x03" + frame(b"C" + b"\x11" * 32) + proof(b"rank0", 1)
    yield "handshake", "client_refused", b"\x03" + frame(b"R")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    for target, name, data in seeds():
        os.makedirs(os.path.join(root, target), exist_ok=True)
        with open(os.path.join(root, target, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
