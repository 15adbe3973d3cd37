"""NumPy quantisers for Q8_0 and Q4_0 (ggml's block layouts, bit-exact with
ggml's reference quantize_row_*_ref), used to write model files
deterministically without a context.

  Q8_0: 32 weights -> f16 d = max|x| / 127, int8 q = roundf(x / d)
  Q4_0: 32 weights -> f16 d = m / -8 with m the weight of largest |x|,
        nibble q = min(15, trunc(x / d + 8.5)); w = (q - 8) d; byte j holds
        q[j] (low nibble) and q[j + 16] (high nibble)
"""

import numpy as np


def quantize_q8_0(w):
    x = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = amax / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf: halves away from 0
    out = np.empty((x.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize_q4_0(w):
    x = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    m = x[np.arange(x.shape[0]), idx]
    d = m / np.float32(-8)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    q = np.minimum(15, np.trunc(x * inv[:, None] + np.float32(8.5))).astype(np.uint8)
    out = np.empty((x.shape[0], 18), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(-1)


def dequantize(raw, fmt, shape):
    """float64 weights of `shape` (N, K) from Q8_0 / Q4_0 bytes."""
    raw = np.frombuffer(memoryview(raw), np.uint8)
    if fmt == "q8_0":
        b = raw.reshape(-1, 34)
        d = b[:, :2].copy().view(np.float16).astype(np.float64)
        q = b[:, 2:].copy().view(np.int8).astype(np.float64)
        return (q * d).reshape(shape)
    if fmt == "q4_0":
        b = raw.reshape(-1, 18)
        d = b[:, :2].copy().view(np.float16).astype(np.float64)
        lo = (b[:, 2:] & 15).astype(np.float64) - 8
        hi = (b[:, 2:] >> 4).astype(np.float64) - 8
        return (np.concatenate([lo, hi], axis=1) * d).reshape(shape)
    raise ValueError("format %r" % fmt)
