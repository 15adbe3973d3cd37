"""Activation checkpointing on a small MLP with tensorcore.

The network: L hidden layers h_i = tanh(h_{i-1} @ W_i) (h_0 = x), then a
linear output y = h_L @ W_out, and the loss 0.5 * sum((y - t)^2) / B. Every
GEMM runs in tensorcore (f32) and every activation lives in a tensorcore
buffer; tanh and the loss are NumPy (tensorcore has no tanh kernel). tanh,
not ReLU, so that the float64 cross-check is smooth: a ReLU mask flips where
f32 and f64 pre-activations straddle zero.

Backward, layer by layer from the top (dZ_i is the gradient of the
pre-activation; for the output layer dZ = (y - t) / B):
    dW_i     = h_{i-1}^T @ dZ_i
    dh_{i-1} = dZ_i @ W_i^T
    dZ_{i-1} = dh_{i-1} * (1 - h_{i-1}^2)
so step i needs h_{i-1}, and h_i is dead once step i+1 is done.

Run twice: keeping every activation, and checkpointed: every activation is
registered with tc.checkpoint_register, only every k-th (k = ceil(sqrt L))
stays resident after the forward pass, and the backward pass realizes the
ones it needs. A realize runs the layer's recompute callback, which first
realizes the layer below if that one was discarded, so a whole segment is
recomputed once. Peak memory is tensorcore's live buffer bytes
(memory_tier_usage("l0")), sampled after every call that allocates.

    python examples/checkpointing/mlp_checkpointing.py [--device cpu|cuda]
"""

import argparse
import math
import time

import numpy as np

import tensorcore as tc


class LiveBytes:
    """Peak of the context's live buffer bytes; sample() after every allocation."""

    def __init__(self, ctx):
        self.ctx, self.peak = ctx, 0
        self.sample()

    def sample(self):
        used = self.ctx.memory_tier_usage("l0")[0]
        self.peak = max(self.peak, used)
        return used


def tanh_inplace(buf, shape):
    h = buf.to_numpy(shape, np.float32)
    np.tanh(h, out=h)
    buf.write(h)


def train_step(device, weights, x, t, checkpoint):
    """One forward and backward pass; returns loss, weight gradients, peak
    live bytes, the number of layers recomputed, and seconds."""
    start = time.perf_counter()
    B = x.shape[0]
    L = len(weights) - 1  # hidden layers; weights[L] is the output layer
    every = math.ceil(math.sqrt(L)) if checkpoint else 0
    with tc.Context(device) as ctx:
        live = LiveBytes(ctx)
        W = [ctx.buffer_from_array(w) for w in weights]
        H = [ctx.buffer_from_array(x)] + [None] * L  # H[i] = h_i
        ids = {}  # layer -> checkpoint id
        recomputed = [0]

        def layer(i):  # H[i] = tanh(H[i-1] @ W[i-1])
            K, N = weights[i - 1].shape
            ctx.gemm(H[i - 1], W[i - 1], H[i], B, N, K, dtype="f32", accum="f32")
            tanh_inplace(H[i], (B, N))

        def recompute(i):  # the checkpoint callback of layer i
            if i - 1 in ids:
                tc.checkpoint_realize(ids[i - 1])  # no-op when the layer below is resident
            live.sample()
            recomputed[0] += 1
            layer(i)

        # Forward. Checkpointed: h_{i-1} goes as soon as h_i exists, unless it is a k-th layer.
        for i in range(1, L + 1):
            H[i] = ctx.buffer(B * weights[i - 1].shape[1] * 4)
            live.sample()
            layer(i)
            if checkpoint:
                ids[i] = tc.checkpoint_register(H[i], recompute, i)
                if i - 1 in ids and (i - 1) % every:
                    tc.checkpoint_discard(ids[i - 1])
        n_out = weights[L].shape[1]
        Y = ctx.buffer(B * n_out * 4)
        live.sample()
        ctx.gemm(H[L], W[L], Y, B, n_out, weights[L].shape[0], dtype="f32", accum="f32")
        y = Y.to_numpy((B, n_out), np.float32)
        Y.close()
        loss = 0.5 * float(np.sum((y.astype(np.float64) - t) ** 2)) / B

        # Backward.
        dZ = ctx.buffer_from_array(((y - t) / B).astype(np.float32))
        live.sample()
        grads = [None] * (L + 1)
        for i in range(L + 1, 0, -1):  # step i: layer i's weights W[i-1], input H[i-1]
            if i <= L:  # h_i was last used by step i+1
                if i in ids:
                    tc.checkpoint_unregister(ids.pop(i))
                H[i].close()
            if i - 1 in ids:
                tc.checkpoint_realize(ids[i - 1])
                live.sample()
            K, N = weights[i - 1].shape
            dW = ctx.buffer(K * N * 4)
            live.sample()
            ctx.gemm(H[i - 1], dZ, dW, K, N, B, dtype="f32", accum="f32", transpose_a=True)
            grads[i - 1] = dW.to_numpy((K, N), np.float32)
            dW.close()
            if i > 1:
                dH = ctx.buffer(B * K * 4)
                live.sample()
                ctx.gemm(dZ, W[i - 1], dH, B, K, N, dtype="f32", accum="f32", transpose_b=True)
                dh = dH.to_numpy((B, K), np.float32)
                h = H[i - 1].to_numpy((B, K), np.float32)
                dh *= 1.0 - h * h
                dH.write(dh)
                dZ.close()
                dZ = dH
        dZ.close()
        for w in W + H[:1]:
            w.close()
    return loss, grads, live.peak, recomputed[0], time.perf_counter() - start


def reference_grads(weights, x, t):
    """The same pass in float64 NumPy."""
    hs = [x.astype(np.float64)]
    for w in weights[:-1]:
        hs.append(np.tanh(hs[-1] @ w))
    y = hs[-1] @ weights[-1]
    dz = (y - t) / x.shape[0]
    grads = [None] * len(weights)
    for i in range(len(weights) - 1, -1, -1):
        grads[i] = hs[i].T @ dz
        if i:
            dz = (dz @ weights[i].T) * (1.0 - hs[i] ** 2)
    return 0.5 * float(np.sum((y - t) ** 2)) / x.shape[0], grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--outputs", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    dims = [args.width] * (args.layers + 1) + [args.outputs]
    weights = [(rng.standard_normal((dims[i], dims[i + 1])) * math.sqrt(1.0 / dims[i])).astype(np.float32)
               for i in range(len(dims) - 1)]
    x = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    t = rng.standard_normal((args.batch, args.outputs)).astype(np.float32)

    plain = train_step(args.device, weights, x, t, checkpoint=False)
    ckpt = train_step(args.device, weights, x, t, checkpoint=True)
    ref_loss, ref = reference_grads(weights, x, t)

    # The checkpointed run recomputes with the same kernels on the same
    # inputs: its gradients are the same bits.
    assert plain[0] == ckpt[0], (plain[0], ckpt[0])
    for g0, g1 in zip(plain[1], ckpt[1]):
        np.testing.assert_array_equal(g0, g1)
    worst = max(float(np.max(np.abs(g - r)) / (np.max(np.abs(r)) + 1e-30)) for g, r in zip(ckpt[1], ref))
    assert worst < 1e-4, worst
    assert abs(ckpt[0] - ref_loss) <= 1e-5 * abs(ref_loss)

    act = args.batch * args.width * 4
    print("device %s: batch %d, width %d, %d hidden layers, %d outputs (one activation = %.2f MiB)" % (
        args.device, args.batch, args.width, args.layers, args.outputs, act / 2**20))
    print("%-14s %16s %12s %10s" % ("run", "peak live MiB", "recomputed", "seconds"))
    for name, r in (("all resident", plain), ("checkpointed", ckpt)):
        print("%-14s %16.2f %12d %10.3f" % (name, r[2] / 2**20, r[3], r[4]))
    print("peak saved: %.2f MiB (%.0f%%); gradients identical to the resident run, "
          "max relative difference from float64 NumPy %.1e; loss %.6f" % (
              (plain[2] - ckpt[2]) / 2**20, 100.0 * (plain[2] - ckpt[2]) / plain[2], worst, ckpt[0]))


if __name__ == "__main__":
    main()
