#!/usr/bin/env python3
"""tensorcore's CUDA backend next to PyTorch on the same GPU, same shapes,
same process: each op timed with CUDA-synchronised wall clock over many
back-to-back launches after warm-up (median of several repeats), on fresh
random data. Prints a table with the ratio ours/torch (>1 = we are faster)
and, with --write, stores it in bench/results/h200.md.

Families: gemm (f32, tf32, f16, bf16, i8 at 8192^3; 4096x4096xK for K in
512..4096; batched); training (RMSNorm, LayerNorm, softmax, SwiGLU, GEGLU, RoPE,
AdamW forward and backward at 16384x8192 bf16, GB/s against the copy
bandwidth); attention (B=4, S=4096, H*D=4096 with D 128 and 64,
f16/bf16, causal or not, forward and forward+backward, against PyTorch's
fastest SDPA backend); quant (quantized GEMV, M=1, Q4_0/Q8_0/Q4_K/Q6_K, GB/s of
weight bytes from kernel time against the copy bandwidth, the streaming and the
warp-per-row kernels side by side; M=4 and 16 for reference); conv2d (ResNet-50 layers at batch 32, forward and both
backward passes, against cuDNN; informational, no target); transfer (write/read
of pageable host memory against torch's copies; informational). Run on a
machine with a GPU and PyTorch."""

import argparse
import datetime
import itertools
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# The attention rows measure cuDNN's engines in their steady state: the plan at a
# shape's first call (by default a shape waits for its 64th, docs/configuration.md).
import os  # noqa: E402
os.environ.setdefault("TC_CUDNN_PLAN_AFTER", "1")

import tensorcore as tc  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def timed(fn, sync, iters, repeats=5):
    """Median seconds per call of fn() over `iters` back-to-back calls."""
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


class Bench:
    def __init__(self, torch, device):
        self.torch = torch
        self.ctx = tc.Context(device)
        self.stream = self.ctx.stream()
        self.rows = []

    def row(self, family, case, unit, ours, peer, target):
        ratio = ours / peer if peer else float("nan")
        ok = "PASS" if ratio >= target else "FAIL"
        self.rows.append((family, case, unit, ours, peer, ratio, target, ok))
        print("%-10s %-34s %10.1f %10.1f %s  ratio %.3f (target >= %.2f) %s" %
              (family, case, ours, peer, unit, ratio, target, ok), flush=True)

    # -- GEMM ---------------------------------------------------------------
    def gemm(self, M, N, K, dtype, batch=1, target=0.97):
        torch = self.torch
        tdt = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
               "i8": torch.int8}[dtype]
        ndt = {"f32": np.float32, "tf32": np.float32, "f16": np.float16, "bf16": np.float32, "i8": np.int8}[dtype]
        rng = np.random.default_rng(0)

        def rand(shape):
            if dtype == "i8":
                return rng.integers(-128, 128, size=shape, dtype=np.int8)
            return rng.standard_normal(shape, dtype=np.float32).astype(ndt)

        a = rand((batch, M, K))
        b = rand((batch, N, K)) if dtype == "i8" else rand((batch, K, N))
        elem = 1 if dtype == "i8" else 2 if dtype in ("f16", "bf16") else 4
        A = self.ctx.buffer(a.size * elem)
        B = self.ctx.buffer(b.size * elem)
        C = self.ctx.buffer(batch * M * N * (4 if dtype in ("i8", "f32", "tf32") else 2))
        if dtype == "bf16":  # write bf16 bits
            import ml_dtypes
            A.write(a.astype(ml_dtypes.bfloat16))
            B.write(b.astype(ml_dtypes.bfloat16))
        else:
            A.write(a)
            B.write(b)
        kw = dict(dtype="f32" if dtype == "tf32" else dtype, accum="i32" if dtype == "i8" else "f32",
                  allow_tf32=dtype == "tf32", transpose_b=dtype == "i8")
        if batch == 1:
            ours_fn = lambda: self.ctx.gemm_async(A, B, C, M, N, K, self.stream, **kw)
        else:
            ours_fn = lambda: self.ctx.gemm_batched(A, B, C, batch, M, N, K, stream=self.stream, **kw)
        flops = 2.0 * batch * M * N * K
        iters = max(3, min(200, int(2e13 / flops)))
        t_ours = timed(ours_fn, self.stream.sync, iters)

        ta = torch.from_numpy(a).to("cuda") if dtype != "bf16" else torch.from_numpy(a).to("cuda", tdt)
        tb = torch.from_numpy(b).to("cuda") if dtype != "bf16" else torch.from_numpy(b).to("cuda", tdt)
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        if dtype == "i8":
            ta2, tb2 = ta[0], tb[0].t()
            peer_fn = lambda: torch._int_mm(ta2, tb2)
        elif batch == 1:
            ta2, tb2 = ta[0], tb[0]
            peer_fn = lambda: torch.matmul(ta2, tb2)
        else:
            peer_fn = lambda: torch.bmm(ta, tb)
        t_peer = timed(peer_fn, torch.cuda.synchronize, iters)
        # Kernel time too: where the GEMM takes about as long as a call from
        # Python, the wall-clock ratio measures the call path, not cuBLASLt.
        k_peer = self.kernel_seconds(peer_fn, iters)
        torch.backends.cuda.matmul.allow_tf32 = False
        k_ours = self.kernel_seconds(ours_fn, iters)
        unit = "TOP/s" if dtype == "i8" else "TFLOP/s"
        case = "%s %dx%dx%d%s" % (dtype, M, N, K, " x%d" % batch if batch > 1 else "")
        if k_ours and k_peer:
            case += " (kernel: %.0f vs %.0f)" % (flops / k_ours / 1e12, flops / k_peer / 1e12)
        self.row("gemm", case, unit, flops / t_ours / 1e12, flops / t_peer / 1e12, target)
        for buf in (A, B, C):
            buf.close()

    def gemm_suite(self):
        for dt in ("bf16", "f16", "tf32", "f32", "i8"):
            self.gemm(8192, 8192, 8192, dt)
        for K in (512, 1024, 2048, 4096):
            for dt in ("bf16", "f16"):
                self.gemm(4096, 4096, K, dt, target=0.9)
        for dt in ("bf16", "f16"):
            self.gemm(1024, 1024, 1024, dt, batch=32, target=0.9)

    # -- attention (FlashAttention-style forward and backward) ----------------
    def attention(self, B, S, H, D, dtype, causal, backward, target=1.0):
        """Ours against PyTorch's fastest SDPA backend on [B, H, S, D] inputs
        (the same device memory, through buffer_from_ptr). FLOPs: 4 B H S^2 D
        for the forward (halved when causal), 2.5x that for the backward."""
        torch = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        F = torch.nn.functional
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=tdt, generator=gen) for _ in range(4))
        o, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        wrap = lambda t: self.ctx.buffer_from_ptr(t.data_ptr(), t.numel() * t.element_size())  # noqa: E731
        Q, K, V, dO, O, dQ, dK, dV, L = (wrap(t) for t in (q, k, v, do, o, dq, dk, dv, lse))
        kw = dict(dtype=dtype, causal=causal)
        dims = (B, H, S, S, D)
        if backward:
            def ours_fn():
                self.ctx.attention_forward(Q, K, V, O, *dims, LSE=L, **kw)
                self.ctx.attention_backward(Q, K, V, O, dO, L, dQ, dK, dV, *dims, **kw)
        else:
            ours_fn = lambda: self.ctx.attention_forward_async(Q, K, V, O, *dims, self.stream, **kw)  # noqa: E731
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0) * (3.5 if backward else 1.0)
        iters = max(3, min(50, int(2e13 / flops)))
        t_ours = timed(ours_fn, self.stream.sync, iters)
        kernel = tc.cuda_last_kernel_name()
        if backward:  # name both paths: cudnn_sdpa_* or our attention_* kernels
            self.ctx.attention_forward(Q, K, V, O, *dims, LSE=L, **kw)
            kernel = "%s + %s" % (tc.cuda_last_kernel_name(), kernel)

        qg, kg, vg = (t.clone().requires_grad_(backward) for t in (q, k, v))
        best = None
        for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                continue

            def peer_fn():
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                    if backward:
                        qg.grad = kg.grad = vg.grad = None
                        out.backward(do)
            try:
                t = timed(peer_fn, torch.cuda.synchronize, iters)
            except Exception:  # a backend that does not take these inputs
                continue
            if best is None or t < best[0]:
                best = (t, name.split("_")[0].lower())
        case = "%s B%d S%d H%d D%d %s %s" % (dtype, B, S, H, D, "causal" if causal else "full",
                                             "fwd+bwd" if backward else "fwd")
        if best is None:
            print("attention %s: no PyTorch SDPA backend ran" % case)
            return
        print("  ours: %s; torch: %s" % (kernel, best[1]))
        self.row("attention", case + " vs " + best[1], "TFLOP/s", flops / t_ours / 1e12, flops / best[0] / 1e12,
                 target)
        for buf in (Q, K, V, dO, O, dQ, dK, dV, L):
            buf.close()

    def attention_suite(self):
        # Total width H * D = 4096 in both shapes.
        for H, D in ((32, 128), (64, 64)):
            for dt in ("bf16", "f16"):
                for causal in (False, True):
                    for backward in (False, True):
                        self.attention(4, 4096, H, D, dt, causal, backward)
    # -- conv2d -------------------------------------------------------------
    # Forward, backward_input and backward_weight against F.conv2d and
    # aten.convolution_backward (cuDNN). The issue sets no target: the ratio
    # is informational (target 0). f32 runs with cuDNN's TF32 off, as ours.
    def conv2d(self, N, C, K, H, W, k, pad, stride, dtype):
        torch = self.torch
        F = torch.nn.functional
        ndt, tdt = {"f16": (np.float16, torch.float16), "f32": (np.float32, torch.float32)}[dtype]
        OH, OW = tc.conv2d_output_shape(H, W, k, k, pad, pad, stride, stride)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W), dtype=np.float32).astype(ndt)
        w = (rng.standard_normal((K, C, k, k), dtype=np.float32) / np.sqrt(C * k * k)).astype(ndt)
        bias = rng.standard_normal(K, dtype=np.float32).astype(ndt)
        dy = rng.standard_normal((N, K, OH, OW), dtype=np.float32).astype(ndt)
        X, Wt, B, dY = (self.ctx.buffer_from_array(a) for a in (x, w, bias, dy))
        es = np.dtype(ndt).itemsize
        Y, dX, dW = (self.ctx.buffer(n * es) for n in (dy.size, x.size, w.size))
        col = self.ctx.buffer(tc.conv2d_scratch_bytes(N, C, H, W, k, k, pad, pad, stride, stride))
        dx32 = self.ctx.buffer(tc.conv2d_backward_input_scratch_bytes(N, C, H, W))
        shape = dict(batch=N, in_channels=C, out_channels=K, H=H, W_in=W, kH=k, kW=k, pad_h=pad, pad_w=pad,
                     stride_h=stride, stride_w=stride, dtype=dtype)
        tx, tw, tb, tdy = (torch.from_numpy(a).to("cuda") for a in (x, w, bias, dy))
        conv_bw = torch.ops.aten.convolution_backward
        old_tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        cases = [
            ("fwd", lambda: self.ctx.conv2d_forward(X, Wt, B, Y, col, **shape),
             lambda: F.conv2d(tx, tw, tb, stride, pad)),
            ("bwd_input", lambda: self.ctx.conv2d_backward_input(dY, Wt, dX, col, dx32, **shape),
             lambda: conv_bw(tdy, tx, tw, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                             [True, False, False])),
            ("bwd_weight", lambda: self.ctx.conv2d_backward_weight(X, dY, dW, col, **shape),
             lambda: conv_bw(tdy, tx, tw, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                             [False, True, False])),
        ]
        flops = 2.0 * N * K * C * k * k * OH * OW
        iters = max(3, min(100, int(5e12 / flops)))
        for name, ours_fn, peer_fn in cases:
            t_ours = timed(ours_fn, lambda: None, iters)  # each call is synchronous
            t_peer = timed(peer_fn, torch.cuda.synchronize, iters)
            case = "%s %s N%d C%d K%d %dx%d k%d s%d" % (name, dtype, N, C, K, H, W, k, stride)
            self.row("conv2d", case, "TFLOP/s", flops / t_ours / 1e12, flops / t_peer / 1e12, 0.0)
        torch.backends.cudnn.allow_tf32 = old_tf32
        for buf in (X, Wt, B, dY, Y, dX, dW, col, dx32):
            buf.close()

    def conv2d_suite(self):
        # ResNet-50 at batch 32: stem, the 3x3 convolutions of each stage, a 1x1 expansion.
        for N, C, K, H, W, k, pad, stride in [(32, 3, 64, 224, 224, 7, 3, 2), (32, 64, 64, 56, 56, 3, 1, 1),
                                              (32, 128, 128, 28, 28, 3, 1, 1), (32, 256, 256, 14, 14, 3, 1, 1),
                                              (32, 512, 512, 7, 7, 3, 1, 1), (32, 64, 256, 56, 56, 1, 0, 1)]:
            self.conv2d(N, C, K, H, W, k, pad, stride, "f16")
        self.conv2d(32, 64, 64, 56, 56, 3, 1, 1, "f32")

    # -- transfer: Buffer.write/read of pageable NumPy memory (our pinned
    # staging) against torch's copies of the same pageable memory. GB/s,
    # informational (target 0).
    def transfer_suite(self):
        torch = self.torch
        for mib in (16, 256, 1024):
            host = np.random.default_rng(0).integers(0, 256, mib << 20, dtype=np.uint8)
            out = np.empty_like(host)
            buf = self.ctx.buffer(host.nbytes)
            dev = torch.empty(host.nbytes, dtype=torch.uint8, device="cuda")
            th, to = torch.from_numpy(host), torch.from_numpy(out)
            gb = host.nbytes / 1e9
            iters = max(3, 2048 // mib)
            t_w = timed(lambda: buf.write(host), lambda: None, iters)
            t_tw = timed(lambda: dev.copy_(th), torch.cuda.synchronize, iters)
            self.row("transfer", "write (h2d) %d MiB pageable" % mib, "GB/s", gb / t_w, gb / t_tw, 0.0)
            t_r = timed(lambda: buf.read(out), lambda: None, iters)
            t_tr = timed(lambda: to.copy_(dev), torch.cuda.synchronize, iters)
            self.row("transfer", "read (d2h) %d MiB pageable" % mib, "GB/s", gb / t_r, gb / t_tr, 0.0)
            buf.close()
            del dev
    # -- quantized GEMV --------------------------------------------------------
    # Decode (M = 1) streams the weights once: the figure of merit is weight
    # bytes per second, against what the GPU can copy. The peer is torch's own
    # copy of a uint8 tensor of the same size (dst.copy_(src)), counted in
    # bytes read; the target is 85% of that. Both cycle through
    # enough copies (> 256 MB) that nothing is served from the 50 MB L2, as in
    # a decoder whose every layer has its own weights. Weights are random
    # bytes (speed does not depend on the values); X and Y are f16 (the
    # 8-bit activation kernels), or f32 for the exact f32 kernels.
    # -- quantized GEMV ------------------------------------------------------
    # GB/s of weight bytes. Judged on KERNEL time: the sum of the device
    # durations of our GEMV kernels (every kernel whose name contains "gemv")
    # that the CUDA profiler (CUPTI, which records every kernel of the
    # process, ours included, on any stream) saw, per call. The wall clock of
    # an _async call plus a stream sync is also printed: for small shapes
    # (4096x4096 Q4_0 is 9.4 MB, ~2.6 us at 3.6 TB/s) it measures the ctypes
    # call, not the kernel. Weights rotate through > 256 MB of copies so
    # L2 (50 MB) never serves them. What is timed is what a call runs (for
    # one row of f16 X against Q4_0 / Q8_0: 8-bit activations and the dp4a
    # kernel; otherwise the streaming or f32 kernels): the other kernel
    # generations lost their benchmarks and were removed, with the switches
    # that chose them.
    # Target: kernel-time GB/s >= 0.85 x 4225 GB/s (the H200's copy).
    QUANT_VARIANTS = (("default", {}),)
    QUANT_ENV = ("TC_CUDA_PDL",)

    def gemv_kernel_seconds(self, fn, iters):
        """Device seconds per call of the GEMV kernels fn launches (CUDA
        profiler), or None where the profiler is unavailable."""
        try:
            from torch.profiler import ProfilerActivity, profile
            fn()
            self.stream.sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iters):
                    fn()
                self.stream.sync()
                self.torch.cuda.synchronize()
            evs = [e for e in prof.key_averages() if "gemv" in e.key or "quantize_q8" in e.key]
            us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) for e in evs)
            # Which kernels ran (a silent fallback shows here): names up to the template arguments.
            print("  kernels: %s" % ", ".join(sorted({e.key.split("(")[0][:90] for e in evs})), flush=True)
            return us * 1e-6 / iters if us > 0 else None
        except Exception as e:  # the profiler is optional
            print("  (no kernel times: %s)" % e)
            return None

    def quant(self, fmt, N, K, target=0.85, dtype="f16", M=1):
        import os
        torch = self.torch
        rng = np.random.default_rng(0)
        nbytes = tc.quantized_size(fmt, N, K)
        copies = max(2, -(-(256 << 20) // nbytes))
        Ws = [self.ctx.buffer(nbytes) for _ in range(copies)]
        for W in Ws:
            W.write(rng.integers(0, 256, size=nbytes, dtype=np.uint8))
        xdt = np.float16 if dtype == "f16" else np.float32
        X = self.ctx.buffer_from_array(rng.standard_normal((M, K)).astype(xdt))
        Y = self.ctx.buffer(M * N * (2 if dtype == "f16" else 4))
        nxt = itertools.cycle(Ws)
        ours_fn = lambda: self.ctx.gemv_quantized_async(X, next(nxt), Y, fmt, M, N, K, self.stream, dtype=dtype)
        iters = max(20, min(500, int(4e9 / nbytes)))
        pairs = [(torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda"),
                  torch.empty(nbytes, dtype=torch.uint8, device="cuda")) for _ in range(copies)]
        tnxt = itertools.cycle(pairs)

        def peer_fn():
            src, dst = next(tnxt)
            dst.copy_(src)
        peer = nbytes / timed(peer_fn, torch.cuda.synchronize, iters) / 1e9
        saved = {k: os.environ.get(k) for k in self.QUANT_ENV}
        try:
            for name, env in self.QUANT_VARIANTS:
                for k in self.QUANT_ENV:
                    os.environ.pop(k, None)
                os.environ.update(env)
                # Kernel times add up non-overlapping kernels: the 8-bit path is
                # two (quantize X, product), which programmatic launch overlaps.
                os.environ["TC_CUDA_PDL"] = "0"
                wall = nbytes / timed(ours_fn, self.stream.sync, iters) / 1e9
                k = self.gemv_kernel_seconds(ours_fn, iters)
                kern = nbytes / k / 1e9 if k else None
                ours = kern or wall
                ratio = ours / self.COPY_GBPS
                ok = "PASS" if ratio >= target else "FAIL"
                if name != "default" or M != 1:
                    ok = "(info)"
                case = "%s M=%d %dx%d %s %s (%s)" % (fmt, M, N, K, dtype, name, "kernel time" if kern else "wall clock")
                self.rows.append(("quant", case, "GB/s", ours, peer, ratio, target, ok))
                print("%-10s %-44s kernel %7s wall %7.1f GB/s  torch copy %7.1f  kernel/4225 %.3f (target >= %.2f) %s"
                      % ("quant", case, "%.1f" % kern if kern else "n/a", wall, peer, ratio, target, ok), flush=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        for buf in Ws + [X, Y]:
            buf.close()
        del pairs

    def quant_suite(self):
        for fmt in ("q4_0", "q8_0", "q4_k", "q6_k"):
            for N, K in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)):
                self.quant(fmt, N, K)
            self.quant(fmt, 14336, 4096, dtype="f32")
        # Small batches (informational): one pass over W serves M rows of X
        # (f16: 8-bit activations, up to 8 rows a load of W; the target for
        # 16 rows is at most twice the time of one, i.e. GB/s >= half of M=1's).
        for M in (4, 16):
            self.quant("q4_0", 14336, 4096, dtype="f32", M=M)
        for fmt in ("q4_0", "q4_k"):
            for M in (2, 4, 8, 16):
                self.quant(fmt, 14336, 4096, dtype="f16", M=M)

    # -- training kernels ---------------------------------------------------
    # Memory-bound: each op's figure is GB/s = (bytes it reads + bytes it
    # writes, each tensor once) / time. The target compares OUR GB/s with
    # 0.85 x the H200's measured copy bandwidth (4225 GB/s read + write); the
    # torch column is PyTorch eager on the same shape for reference. Our
    # calls are synchronous (the ABI has no _async training calls), so their
    # wall clock includes one stream synchronisation per call; the GB/s come
    # from kernel time (the CUDA profiler sees our kernels and torch's) when
    # the profiler works, and both figures are printed.
    COPY_GBPS = 4225.0
    TRAIN_TARGET = 0.85

    def kernel_seconds(self, fn, iters):
        """GPU time per call summed over every kernel fn launches (ours or
        torch's), from the CUDA profiler; None where it is unavailable."""
        try:
            from torch.profiler import ProfilerActivity, profile
            fn()
            self.torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iters):
                    fn()
                self.torch.cuda.synchronize()
            us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                     for e in prof.key_averages())
            return us * 1e-6 / iters if us > 0 else None
        except Exception as e:  # the profiler is optional: fall back to wall clock
            print("  (no kernel times: %s)" % e)
            return None

    def train_row(self, case, nbytes, t_ours, t_torch, k_ours=None, k_torch=None, torch_nbytes=None):
        """GB/s from kernel time where the profiler gave one (else wall
        clock, which for our synchronous calls includes a stream sync)."""
        tb = torch_nbytes or nbytes
        ours, peer = nbytes / (k_ours or t_ours) / 1e9, tb / (k_torch or t_torch) / 1e9
        ratio = ours / self.COPY_GBPS
        ok = "PASS" if ratio >= self.TRAIN_TARGET else "FAIL"
        how = "kernel time" if k_ours else "wall clock"
        label = "%s (%s; ratio = ours / 4225 GB/s copy)" % (case, how)
        self.rows.append(("training", label, "GB/s", ours, peer, ratio, self.TRAIN_TARGET, ok))
        print("%-10s %-50s ours %7.1f torch %7.1f GB/s (%s; wall: ours %.1f torch %.1f)  ours/copy %.3f "
              "(target >= %.2f) %s" % ("training", case, ours, peer, how, nbytes / t_ours / 1e9, tb / t_torch / 1e9,
                                        ratio, self.TRAIN_TARGET, ok), flush=True)

    def training_suite(self, N=16384, D=8192):
        import ml_dtypes
        torch, F, ctx = self.torch, self.torch.nn.functional, self.ctx
        # torch.nn.functional.rms_norm is PyTorch >= 2.4; before, its formula
        rms_norm = getattr(F, "rms_norm", None) or (
            lambda t, shape, w, e: t * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + e).to(t.dtype) * w)
        n, es, eps = N * D, 2, 1e-5
        S = n * es  # bytes of one [N, D] bf16 tensor
        rng = np.random.default_rng(0)
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        w = (1.0 + 0.1 * rng.standard_normal(D, dtype=np.float32))

        def dev(arr):  # a bf16 device buffer of arr
            buf = ctx.buffer(arr.size * es)
            buf.write(arr.astype(ml_dtypes.bfloat16))
            return buf

        def tdev(arr, shape):
            return torch.from_numpy(arr).to("cuda", torch.bfloat16).reshape(shape)

        X, DY, G, B = dev(a), dev(b), dev(w), dev(w - 1.0)
        Y, DX, Z = ctx.buffer(S), ctx.buffer(S), ctx.buffer(S)
        R, MU = ctx.buffer(N * 4), ctx.buffer(N * 4)
        DG, DB = ctx.buffer(D * 4), ctx.buffer(D * 4)
        tx, tdy, tg, tb = tdev(a, (N, D)), tdev(b, (N, D)), tdev(w, (D,)), tdev(w - 1.0, (D,))
        iters = 20
        sync = torch.cuda.synchronize

        def both(case, nbytes, ours_fn, torch_fn, torch_nbytes=None):
            t_ours = timed(ours_fn, lambda: None, iters)
            t_torch = timed(torch_fn, sync, iters)
            k_ours, k_torch = self.kernel_seconds(ours_fn, iters), self.kernel_seconds(torch_fn, iters)
            self.train_row(case, nbytes, t_ours, t_torch, k_ours, k_torch, torch_nbytes)

        def grad_fn(out, inputs, grad):  # backward of one op, graph kept for the next call
            return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)

        shape = "%dx%d bf16" % (N, D)
        # RMSNorm: forward reads X, gamma, writes Y, rstd; backward reads X, dY, gamma, rstd, writes dX, dgamma
        both("rmsnorm_forward " + shape, 2 * S + D * es + N * 4,
             lambda: tc.rmsnorm_forward(ctx, X, G, Y, R, N, D, eps=eps, dtype="bf16"),
             lambda: rms_norm(tx, (D,), tg, eps))
        xr, gr = tx.clone().requires_grad_(), tg.clone().requires_grad_()
        yr = rms_norm(xr, (D,), gr, eps)
        both("rmsnorm_backward " + shape, 3 * S + D * es + N * 4 + D * 4,
             lambda: tc.rmsnorm_backward(ctx, X, G, DY, R, DX, DG, N, D, dtype="bf16"),
             grad_fn(yr, (xr, gr), tdy))
        # LayerNorm (with beta): the same plus beta, mean and dbeta
        both("layernorm_forward " + shape, 2 * S + 2 * D * es + 2 * N * 4,
             lambda: tc.layernorm_forward(ctx, X, G, B, Y, MU, R, N, D, eps=eps, dtype="bf16"),
             lambda: F.layer_norm(tx, (D,), tg, tb, eps))
        br = tb.clone().requires_grad_()
        yl = F.layer_norm(xr, (D,), gr, br, eps)
        both("layernorm_backward " + shape, 3 * S + D * es + 2 * N * 4 + 2 * D * 4,
             lambda: tc.layernorm_backward(ctx, X, G, DY, MU, R, DX, N, D, dgamma=DG, dbeta=DB, dtype="bf16"),
             grad_fn(yl, (xr, gr, br), tdy))
        # softmax: forward reads X, writes Y; backward reads Y, dY, writes dX
        both("softmax_forward " + shape, 2 * S,
             lambda: tc.softmax_forward(ctx, X, Y, N, D, dtype="bf16"),
             lambda: torch.softmax(tx, -1))
        ys = torch.softmax(xr, -1)
        both("softmax_backward " + shape, 3 * S,
             lambda: tc.softmax_backward(ctx, Y, DY, DX, N, D, dtype="bf16"),
             grad_fn(ys, (xr,), tdy))
        # SwiGLU on n elements: forward reads gate, up, writes out; backward reads 3, writes 2
        both("swiglu_forward %d bf16 (silu(g)*u)" % n, 3 * S,
             lambda: tc.swiglu_forward(ctx, X, DY, Y, n, dtype="bf16"),
             lambda: F.silu(tx) * tdy)
        ug = tdy.clone().requires_grad_()
        yw = F.silu(xr) * ug
        both("swiglu_backward %d bf16" % n, 5 * S,
             lambda: tc.swiglu_backward(ctx, X, DY, Y, DX, Z, n, dtype="bf16"),
             grad_fn(yw, (xr, ug), tdy))
        # GEGLU (tanh GELU, Gemma's feed-forward), the same traffic as SwiGLU
        both("geglu_forward %d bf16 (gelu_tanh(g)*u)" % n, 3 * S,
             lambda: tc.geglu_forward(ctx, X, DY, Y, n, dtype="bf16"),
             lambda: F.gelu(tx, approximate="tanh") * tdy)
        yg = F.gelu(xr, approximate="tanh") * ug
        both("geglu_backward %d bf16" % n, 5 * S,
             lambda: tc.geglu_backward(ctx, X, DY, Y, DX, Z, n, dtype="bf16"),
             grad_fn(yg, (xr, ug), tdy))
        del xr, gr, br, yr, yl, ys, ug, yw, yg
        # RoPE, half rotation, [4, 64, 4096, 128] = N x D elements, in place: reads and writes X
        Bt, H, Sq, hd = 4, 64, n // (4 * 64 * 128), 128
        inv = 10000.0 ** (-np.arange(0, hd // 2) * 2.0 / hd)
        theta = np.arange(Sq)[:, None] * inv[None, :]
        cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
        C, Sn = ctx.buffer(cos.nbytes), ctx.buffer(sin.nbytes)
        C.write(cos)
        Sn.write(sin)
        tq = tx.reshape(Bt, H, Sq, hd)
        tcos = torch.from_numpy(np.concatenate([cos, cos], 1)).to("cuda", torch.bfloat16)
        tsin = torch.from_numpy(np.concatenate([sin, sin], 1)).to("cuda", torch.bfloat16)

        def rotate_half(t):
            return torch.cat((-t[..., hd // 2:], t[..., : hd // 2]), dim=-1)

        case = "%s [%d,%d,%d,%d] bf16 (half)" % ("%s", Bt, H, Sq, hd)
        both(case % "rope_forward", 2 * S,
             lambda: tc.rope_forward(ctx, Y, C, Sn, Bt, H, Sq, hd, dtype="bf16"),
             lambda: tq * tcos + rotate_half(tq) * tsin)
        qr = tq.clone().requires_grad_()
        yq = qr * tcos + rotate_half(qr) * tsin
        both(case % "rope_backward", 2 * S,
             lambda: tc.rope_backward(ctx, Y, C, Sn, Bt, H, Sq, hd, dtype="bf16"),
             grad_fn(yq, (qr,), tdy.reshape(Bt, H, Sq, hd)))
        del qr, yq
        for buf in (X, DY, G, B, Y, DX, Z, R, MU, DG, DB, C, Sn):
            buf.close()
        # AdamW on n f32 parameters: reads p, m, v, g and writes p, m, v. Ours
        # takes bf16 gradients (26 bytes per parameter); torch's fused AdamW
        # needs gradients in the parameters' dtype, f32 (28 bytes).
        P, M, V = ctx.buffer(n * 4), ctx.buffer(n * 4), ctx.buffer(n * 4)
        P.write(a)
        M.write(np.zeros(n, np.float32))
        V.write(np.zeros(n, np.float32))
        GR = dev(b)
        tp = torch.nn.Parameter(torch.from_numpy(a).to("cuda"))
        tp.grad = torch.from_numpy(b).to("cuda")
        opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=0.01, fused=True)
        both("adamw_step %d f32 params, grads bf16 (torch f32)" % n, 26 * n,
             lambda: tc.adamw_step(ctx, P, M, V, GR, "bf16", n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001),
             opt.step, torch_nbytes=28 * n)
        for buf in (P, M, V, GR):
            buf.close()
        del tp, opt, tx, tdy, tg, tb
        torch.cuda.empty_cache()
    # -- end of training kernels ----------------------------------------------

    def write(self, path, families):
        """The table of this run's families; rows of the families it did not
        run are kept from the file's previous table (with its date), and so
        is anything written below that table."""
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
        kept, tail, old_date = {}, [], None
        if Path(path).exists():
            old = Path(path).read_text().split("\n")
            in_table = False
            for i, line in enumerate(old):
                if line.startswith("Date: ") and old_date is None:
                    old_date = line[len("Date: "):].split(".")[0]
                if line.startswith("| family |"):
                    in_table = True
                elif in_table and line.startswith("| ") and not line.startswith("|---"):
                    fam = line.split("|")[1].strip()
                    if fam not in families:
                        kept.setdefault(fam, []).append(line)
                elif in_table and not line.startswith("|"):
                    tail = old[i:]
                    break
        run = [f for f in FAMILIES if f in families]
        lines = ["# tensorcore CUDA backend vs PyTorch", "",
                 "Date: %s. GPU: %s. PyTorch %s (CUDA %s). %s." % (
                     datetime.date.today(), gpu, self.torch.__version__, self.torch.version.cuda, tc.version()),
                 "Method: bench/cuda_vs_torch.py; median of 5 repeats of back-to-back launches after warm-up, "
                 "random data; ratio = ours / torch."]
        if kept:
            lines.append("Families measured on this date: %s; the rows of %s are from the previous run (%s)." % (
                ", ".join(run), ", ".join(f for f in FAMILIES if f in kept), old_date or "an earlier date"))
        lines += ["", "| family | case | unit | ours | torch | ratio | target | |", "|---|---|---|---|---|---|---|---|"]
        for fam in FAMILIES:
            if fam in kept:
                lines += kept[fam]
                continue
            for f, c, u, o, p, r, t, ok in self.rows:
                if f == fam:
                    lines.append("| %s | %s | %s | %.1f | %.1f | %.3f | >= %.2f | %s |" % (f, c, u, o, p, r, t, ok))
        Path(path).write_text("\n".join(lines + tail).rstrip("\n") + "\n")
        print("wrote", path)


# Every family, in the order of the results table.
FAMILIES = ("gemm", "training", "attention", "quant", "conv2d", "transfer")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="all", help="comma-separated, or all: " + ", ".join(FAMILIES))
    ap.add_argument("--write", action="store_true", help="store the table in bench/results/h200.md")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is needed for the comparison")
    if not torch.cuda.is_available() or tc.cuda_device_count() == 0:
        sys.exit("no CUDA device")
    b = Bench(torch, "cuda")
    families = FAMILIES if args.families == "all" else tuple(args.families.split(","))
    for fam in families:
        getattr(b, fam + "_suite")()
    if args.write:
        b.write(ROOT / "bench/results/h200.md", families)


if __name__ == "__main__":
    main()
