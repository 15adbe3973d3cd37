"""DiLoCo against synchronous data-parallel training, on a real workload.

A small LLaMA-style byte-level language model (examples/tiny_llama.py) is
trained on text shipped with the system (/usr/share/common-licenses: the
GPL, Apache, Artistic, MPL, ... license texts) by N worker processes
(default 4) over loopback gloo, twice with the same compute:

  ddp     every step: local gradient -> allreduce (avg) -> AdamW, all workers in lockstep
  diloco  every step: local gradient -> local AdamW; every H steps a DiLoCo outer
          step (Nesterov, lr 0.7, momentum 0.9) averages the workers' progress

Both see the same number of tokens per worker per step and take the same
number of steps. Forward, backward and AdamW run on tensorcore's kernels
(tiny_llama.TcModel / TcAdamW; `--kernels numpy` selects the NumPy
reference). The report compares held-out loss curves and the bytes each
worker put on the wire, draws them (PNG), saves the DiLoCo model as a
llama-architecture GGUF and greedily decodes a prompt from that file with
tensorcore's LLaMA harness (tensorcore.llama.Llama), checking that the
harness and the training model agree.

    python examples/diloco_train.py [--workers 4] [--steps 800] [--H 100] [--compress none] [--kernels tc]
                                    [--device cpu|cuda] [--backend gloo|nccl]

`--device cuda` keeps what the collectives and DiLoCo see (the parameter and
gradient buffers) in a CUDA context's memory: the gradient allreduce and the
outer step read device buffers (gloo stages them through page-locked host
memory; `--backend nccl` reads them in place, one GPU per worker), while the
model's kernels keep running on the CPU context. The numbers are those of a
CPU run.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import tiny_llama as M  # noqa: E402


def corpus():
    """All readable license texts, as bytes; 90% train, 10% held out."""
    root = Path("/usr/share/common-licenses")
    text = b"".join(p.read_bytes() + b"\n\n" for p in sorted(root.iterdir()) if p.is_file())
    data = np.frombuffer(text, np.uint8).astype(np.int64)
    cut = int(len(data) * 0.9)
    return data[:cut], data[cut:]


def batch(data, rng, B, T):
    start = rng.integers(0, len(data) - T - 1, B)
    x = np.stack([data[s:s + T] for s in start])
    y = np.stack([data[s + 1:s + T + 1] for s in start])
    return x, y


def lr_at(step, base, warmup, total):
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))


def evaluate(net, batches):
    return float(np.mean([net.loss(x, y) for x, y in batches]))


def config(args):
    return M.Config(dim=args.dim, layers=args.layers, heads=args.heads, ffn=args.ffn, seq=args.seq,
                    rope_interleaved=args.rope == "interleaved")


# ---- one worker ----------------------------------------------------------------------

def worker(args):
    import tensorcore as tc
    rank, world = args.rank, args.workers
    cfg = config(args)
    train, held = corpus()
    rng_eval = np.random.default_rng(12345)
    eval_batches = [batch(held, rng_eval, args.batch, cfg.seq) for _ in range(args.eval_batches)]
    ctx = tc.Context("cpu")
    kctx = ctx if args.kernels == "tc" else None  # None: the NumPy reference kernels
    # The context whose buffers the collectives and DiLoCo see.
    dctx = ctx if args.device == "cpu" else tc.Context("cuda:%d" % (rank if args.backend == "nccl" else 0))
    dist = dctx.dist(args.backend, world, rank, args.url, timeout=300)
    n = cfg.size()
    theta_buf = ctx.buffer(n * 4)
    theta = np.ctypeslib.as_array(ctypes_ptr(theta_buf.map()), (n,))  # a view of the tensorcore buffer
    if args.init:
        theta[...] = np.load(args.init)  # the shared pretrained checkpoint
    else:
        M.init(cfg, theta, seed=args.seed)  # the same start everywhere (DiLoCo also broadcasts rank 0's)
    grad_buf = ctx.buffer(n * 4)
    grad = np.ctypeslib.as_array(ctypes_ptr(grad_buf.map()), (n,))
    # The model reads theta_buf and writes grad_buf in place; AdamW updates theta_buf.
    net = M.model(cfg, theta, grad, kctx)
    opt = M.adamw(cfg, theta, grad, kctx, lr=args.lr, wd=args.wd)
    # Device copies of theta and the gradient, synchronised around the
    # collectives (the same buffers as the kernels' on the CPU).
    theta_dev, grad_dev = (theta_buf, grad_buf) if dctx is ctx else (dctx.buffer(n * 4), dctx.buffer(n * 4))
    rng = np.random.default_rng([7, rank])
    log = {"train": [], "eval": [], "bytes": 0.0, "outer_bytes": [], "seconds": 0.0}
    d = None
    if args.mode == "diloco":
        d = dist.diloco(inner_steps=args.H, outer_lr=args.outer_lr, outer_momentum=0.9,
                        outer_optimizer="nesterov", compress=args.compress)
        if theta_dev is not theta_buf:
            theta_dev.write(theta)
        d.add_parameter("model", theta_dev, n)
        if theta_dev is not theta_buf:
            theta_dev.read(theta)  # rank 0's start
    if rank == 0:
        log["eval"].append((0, evaluate(net, eval_batches)))
    t0 = time.time()
    for step in range(args.steps):
        x, y = batch(train, rng, args.batch, cfg.seq)
        loss = net.loss_and_grad(x, y)
        log["train"].append(float(loss))
        if args.mode == "ddp":
            if grad_dev is not grad_buf:
                grad_dev.write(grad)
            dist.allreduce(grad_dev, n, "f32", "avg")
            if grad_dev is not grad_buf:
                grad_dev.read(grad)
        opt.step(lr_at(step, args.lr, args.warmup, args.steps))
        if d is not None and d.step():
            if theta_dev is not theta_buf:
                theta_dev.write(theta)
            d.apply_outer()
            if theta_dev is not theta_buf:
                theta_dev.read(theta)
            log["outer_bytes"].append(d.last_outer_bytes_sent)
        if rank == 0 and (step + 1) % args.H == 0:
            log["eval"].append((step + 1, evaluate(net, eval_batches)))
            print("[%s] step %d eval %.4f (%.1fs)" % (args.mode, step + 1, log["eval"][-1][1], time.time() - t0),
                  flush=True)
    log["seconds"] = time.time() - t0
    log["bytes"] = float(sum(log["outer_bytes"])) if d is not None else float(dist.bytes_sent)
    if d is not None:
        d.close()
    if rank == 0:
        np.save(args.save, theta.copy())
    dist.close()
    if dctx is not ctx:
        dctx.close()
    ctx.close()
    Path(args.log).write_text(json.dumps(log))


def ctypes_ptr(addr):
    import ctypes
    return ctypes.cast(ctypes.c_void_p(addr), ctypes.POINTER(ctypes.c_float))


# ---- the driver ------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_mode(args, mode, out):
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TC_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = []
    for r in range(args.workers):
        cmd = [sys.executable, __file__, "--role", "worker", "--mode", mode, "--rank", str(r), "--url", url,
               "--init", str(out / "pretrained.npy") if args.pretrain else "",
               "--log", str(out / ("%s_rank%d.json" % (mode, r))), "--save", str(out / ("%s_theta.npy" % mode))]
        cmd += ["--%s" % k.replace("_", "-") + "=" + str(v) for k, v in vars(args).items()
                if k in SHARED]
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("%s worker failed" % mode)
    return [json.loads((out / ("%s_rank%d.json" % (mode, r))).read_text()) for r in range(args.workers)]


SHARED = ("workers", "steps", "pretrain", "H", "compress", "dim", "layers", "heads", "ffn", "seq", "batch", "lr", "wd", "warmup",
          "outer_lr", "eval_batches", "kernels", "rope", "seed", "device", "backend")


def smooth(v, k=25):
    v = np.asarray(v)
    if len(v) < k:
        return v
    return np.convolve(v, np.ones(k) / k, mode="valid")


def plot(results, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_without_matplotlib(results, path)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, logs in results.items():
        tr = np.mean([lg["train"] for lg in logs], 0)
        a1.plot(np.arange(len(smooth(tr))) + 13, smooth(tr), label=mode)
        ev = logs[0]["eval"]
        a2.plot([s for s, _ in ev], [v for _, v in ev], marker="o", label=mode)
    a1.set(title="training loss (mean of workers, smoothed)", xlabel="step", ylabel="nats/byte")
    a2.set(title="held-out loss", xlabel="step", ylabel="nats/byte")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_without_matplotlib(results, path):
    """Held-out loss curves as a plain PNG (no axes text) with zlib alone."""
    import struct
    import zlib
    W, H = 640, 360
    img = np.full((H, W, 3), 255, np.uint8)
    colors = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]
    curves = [[(s, v) for s, v in logs[0]["eval"]] for logs in results.values()]
    xs = [s for c in curves for s, _ in c]
    ys = [v for c in curves for _, v in c]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    def px(s, v):
        return int(20 + (s - x0) / max(1e-9, x1 - x0) * (W - 40)), int(H - 20 - (v - y0) / max(1e-9, y1 - y0) * (H - 40))
    for c, col in zip(curves, colors):
        for (sa, va), (sb, vb) in zip(c, c[1:]):
            (xa, ya), (xb, yb) = px(sa, va), px(sb, vb)
            for t in np.linspace(0, 1, 200):
                img[int(ya + (yb - ya) * t) - 1:int(ya + (yb - ya) * t) + 1, int(xa + (xb - xa) * t)] = col
    raw = b"".join(b"\0" + img[r].tobytes() for r in range(H))
    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xffffffff)
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def pretrain(args, cfg, train, path, kctx):
    """The shared starting checkpoint: `--pretrain` steps of one worker
    (no communication), as DiLoCo's authors start from a pretrained model."""
    theta = np.zeros(cfg.size(), np.float32)
    M.init(cfg, theta, seed=args.seed)
    grad = np.zeros_like(theta)
    net, opt = M.model(cfg, theta, grad, kctx), M.adamw(cfg, theta, grad, kctx, lr=args.lr, wd=args.wd)
    rng = np.random.default_rng(99)
    for step in range(args.pretrain):
        x, y = batch(train, rng, args.batch, cfg.seq)
        loss = net.loss_and_grad(x, y)
        opt.step(lr_at(step, args.lr, args.warmup, args.pretrain))
    np.save(path, theta)
    print("pretrained %d steps on one worker: train loss %.4f" % (args.pretrain, loss), flush=True)


def driver(args):
    import tensorcore as tc
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config(args)
    train, held = corpus()
    print("corpus: %d train bytes, %d held-out bytes; model %d parameters" % (len(train), len(held), cfg.size()))
    ctx = tc.Context("cpu")
    kctx = ctx if args.kernels == "tc" else None
    t_start = time.time()
    if args.pretrain:
        t0 = time.time()
        pretrain(args, cfg, train, out / "pretrained.npy", kctx)
        print("pretrain: %.0f s" % (time.time() - t0), flush=True)
    results = {}
    for mode in ("ddp", "diloco"):
        t0 = time.time()
        results[mode] = run_mode(args, mode, out)
        print("%s: %.0f s" % (mode, time.time() - t0), flush=True)
    final = {m: results[m][0]["eval"][-1][1] for m in results}
    sent = {m: float(np.mean([lg["bytes"] for lg in results[m]])) for m in results}
    secs = {m: float(np.max([lg["seconds"] for lg in results[m]])) for m in results}
    gap = (final["diloco"] - final["ddp"]) / final["ddp"]
    ratio = sent["ddp"] / max(sent["diloco"], 1.0)
    title = "%d workers, %d steps, H=%d, compress=%s" % (args.workers, args.steps, args.H, args.compress)
    plot(results, out / "diloco_loss.png", title)
    # The DiLoCo model as GGUF, decoded greedily from the file by tensorcore's
    # LLaMA harness (KV cache) up to the trained context length.
    theta = np.load(out / "diloco_theta.npy")
    gguf_path = out / "tiny-llama-diloco.gguf"
    M.save_gguf(cfg, theta, gguf_path)
    prompt = list(b"This program is free software; ")
    new, harness_logits = M.decode_gguf(gguf_path, prompt, cfg.seq - len(prompt))
    text = bytes(prompt + new).decode("utf-8", "replace")
    # The training model on the same sequence, in one forward: it decodes the
    # same text greedily iff its argmax reproduces every new token.
    ours = M.model(cfg, theta, np.zeros_like(theta), kctx).logits(np.array([prompt + new[:-1]]))[0]
    same = [int(t) for t in np.argmax(ours[len(prompt) - 1:], -1)] == new
    logit_diff = float(np.max(np.abs(ours - harness_logits)))
    ctx.close()
    report = {
        "config": {k: getattr(args, k) for k in SHARED}, "parameters": cfg.size(),
        "final_eval_loss": final, "relative_gap": gap, "bytes_per_worker": sent, "bytes_ratio": ratio,
        "best_eval_loss": {m: min(v for _, v in results[m][0]["eval"]) for m in results},
        "train_loss_last_100": {m: float(np.mean([lg["train"][-100:] for lg in results[m]])) for m in results},
        "seconds": secs, "total_wall_seconds": time.time() - t_start,
        "eval_curves": {m: results[m][0]["eval"] for m in results},
        "gguf": str(gguf_path.name), "gguf_bytes": gguf_path.stat().st_size, "decoded": text,
        "decode_matches_training_model": same, "decode_max_abs_logit_diff": logit_diff,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("final_eval_loss", "relative_gap", "bytes_per_worker", "bytes_ratio",
                                            "seconds", "decode_matches_training_model", "decode_max_abs_logit_diff")},
                     indent=1))
    print("decoded from GGUF: %r" % text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--H", type=int, default=100, help="inner steps per DiLoCo outer step")
    ap.add_argument("--compress", default="none")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=176)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--outer-lr", dest="outer_lr", type=float, default=0.7)
    ap.add_argument("--pretrain", type=int, default=0, help="steps of one-worker pretraining both runs start from")
    ap.add_argument("--init", default="")
    ap.add_argument("--eval-batches", dest="eval_batches", type=int, default=16)
    ap.add_argument("--kernels", default="tc", choices=["tc", "numpy"],
                    help="forward/backward and AdamW on tensorcore's kernels, or the NumPy reference")
    ap.add_argument("--rope", default="half", choices=["half", "interleaved"],
                    help="RoPE pairs (k, k + hd/2), as the recorded runs (Wq/Wk are permuted into GGUF's order on "
                    "export), or (2k, 2k+1) as GGUF")
    ap.add_argument("--seed", type=int, default=0, help="of the initial weights")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where the buffers the collectives and DiLoCo see live (the kernels run on the CPU)")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                    help="the workers' group (nccl: --device cuda, one GPU per worker)")
    ap.add_argument("--out", default=str(HERE / "diloco_train_out"))
    ap.add_argument("--role", default="driver")
    ap.add_argument("--mode")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--url")
    ap.add_argument("--log")
    ap.add_argument("--save")
    args = ap.parse_args()
    if args.backend == "nccl" and args.device != "cuda":
        ap.error("--backend nccl needs --device cuda")
    (worker if args.role == "worker" else driver)(args)


if __name__ == "__main__":
    main()
