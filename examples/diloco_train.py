"""DiLoCo against synchronous data-parallel training, on a real workload.

A LLaMA-style byte-level language model (examples/tiny_llama.py) is trained
by N worker processes (default 4) over loopback gloo, twice with the same
compute:

  ddp     every step: local gradient -> allreduce (avg) -> AdamW, all workers in lockstep
  diloco  every step: local gradient -> local AdamW; every H steps a DiLoCo outer
          step (Nesterov, lr 0.7, momentum 0.9) averages the workers' progress

Both see the same number of tokens per worker per step and take the same
number of steps. Forward, backward and AdamW run on tensorcore's kernels
(tiny_llama.TcModel / TcAdamW; `--kernels numpy` selects the NumPy
reference). The report compares held-out loss curves, the bytes each worker
put on the wire and the tokens per second of each worker, draws the curves
(PNG), saves the DiLoCo model as a llama-architecture GGUF and greedily
decodes a prompt from that file with tensorcore's LLaMA harness
(tensorcore.llama.Llama), checking that the harness and the training model
agree.

    python examples/diloco_train.py [--workers 4] [--steps 800] [--H 100] [--compress none] [--kernels tc]
                                    [--device cpu|cuda] [--backend gloo|nccl] [--preset small|gpu]
                                    [--corpus licenses|stdlib]

Corpora (`--corpus`): `licenses`, the license texts Debian ships in
/usr/share/common-licenses (303 KB; the default on the CPU), or `stdlib`,
the .py sources of the running Python's standard library
(sysconfig.get_paths()["stdlib"] without site-/dist-packages, in sorted
path order; about 30 MB; the default with --device cuda). Either is
concatenated and split by bytes: the first 90% trains, the rest is held out.

`--device cuda` runs everything of a worker on a CUDA context: the model,
its gradient, AdamW's state and the activations are device buffers, and the
gradient allreduce and DiLoCo's outer step read the same buffers (gloo
stages them through page-locked host memory; `--backend nccl` reads them in
place). With gloo every worker uses cuda:0 (N processes share one GPU);
with nccl worker r uses cuda:r. `--preset gpu` is a model of tens of
millions of parameters (dim 512, 8 layers, 8 heads, ffn 1408, 256-byte
context, batch 16: about 26M parameters, 4096 tokens per worker per step,
products on TF32); any size flag given explicitly overrides the preset.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import tiny_llama as M  # noqa: E402


def corpus(name):
    """The corpus as bytes (token id = byte value): 90% train, 10% held out."""
    if name == "licenses":
        root = Path("/usr/share/common-licenses")
        text = b"".join(p.read_bytes() + b"\n\n" for p in sorted(root.iterdir()) if p.is_file())
    else:
        text = b"".join(t + b"\n\n" for t in stdlib_sources())
    data = np.frombuffer(text, np.uint8)
    cut = int(len(data) * 0.9)
    return data[:cut], data[cut:]


def stdlib_sources():
    """The bytes of every .py file of the running Python's standard library,
    in sorted order of their paths (installed packages left out; unreadable
    files skipped)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("site-packages", "dist-packages")]
        paths += [Path(d, f) for f in files if f.endswith(".py")]
    out = []
    for p in sorted(paths, key=lambda q: q.relative_to(root).as_posix()):
        try:
            out.append(p.read_bytes())
        except OSError:
            continue
    return out


def batch(data, rng, B, T):
    start = rng.integers(0, len(data) - T - 1, B)
    x = np.stack([data[s:s + T] for s in start]).astype(np.int64)
    y = np.stack([data[s + 1:s + T + 1] for s in start]).astype(np.int64)
    return x, y


def lr_at(step, base, warmup, total):
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))


def outer_rates(args, step):
    """The outer lr and momentum for the outer step after `step`. constant:
    the flags' values. inner: they follow the inner cosine schedule's
    fraction s (1 through warmup, 0 at the end) from the flags' values to
    plain averaging (lr 1, momentum 0), so that late, small pseudo-gradients
    are not driven by a momentum built from early, larger ones."""
    if args.outer_schedule == "constant" or step < args.warmup:
        return args.outer_lr, args.outer_momentum
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    s = 0.5 * (1 + np.cos(np.pi * min(1.0, progress)))
    return 1.0 + (args.outer_lr - 1.0) * s, args.outer_momentum * s


def evaluate(net, batches):
    return float(np.mean([net.loss(x, y) for x, y in batches]))


def config(args):
    return M.Config(dim=args.dim, layers=args.layers, heads=args.heads, ffn=args.ffn, seq=args.seq,
                    rope_interleaved=args.rope == "interleaved")


PRESETS = {
    # the recorded CPU runs
    "small": dict(dim=64, layers=2, heads=4, ffn=176, seq=64, batch=8, lr=3e-3, warmup=50, tf32=False),
    # tens of millions of parameters, for a GPU (about 26M; 4096 tokens per worker per step)
    "gpu": dict(dim=512, layers=8, heads=8, ffn=1408, seq=256, batch=16, lr=1e-3, warmup=100, tf32=True),
}


def device_name(args):
    """The context of a worker: the CPU, cuda:0 for every gloo worker (they
    share the GPU), cuda:rank with NCCL (one GPU each)."""
    if args.device == "cpu":
        return "cpu"
    return "cuda:%d" % (args.rank if args.backend == "nccl" and args.rank is not None else 0)


def new_model(args, cfg, ctx, init_theta):
    """theta and the gradient as buffers of ctx (theta written from
    init_theta), the model and AdamW over them."""
    n = cfg.size()
    if args.kernels == "numpy":
        # The NumPy reference computes on host arrays: buffers over them (CPU only).
        theta, grad = init_theta.astype(np.float32).copy(), np.zeros(n, np.float32)
        theta_buf, grad_buf = ctx.buffer_from_ptr(theta), ctx.buffer_from_ptr(grad)
        return theta_buf, grad_buf, M.model(cfg, theta, grad), M.adamw(cfg, theta, grad, lr=args.lr, wd=args.wd)
    theta_buf, grad_buf = ctx.buffer(4 * n), ctx.buffer(4 * n)
    theta_buf.write(np.ascontiguousarray(init_theta, np.float32))
    net = M.model(cfg, theta_buf, grad_buf, ctx, tf32=args.tf32 == "on", stream=args.stream == "on")
    opt = M.adamw(cfg, theta_buf, grad_buf, ctx, lr=args.lr, wd=args.wd)
    return theta_buf, grad_buf, net, opt


# ---- one worker ----------------------------------------------------------------------

def worker(args):
    import tensorcore as tc
    rank, world = args.rank, args.workers
    cfg = config(args)
    train, held = corpus(args.corpus)
    rng_eval = np.random.default_rng(12345)
    eval_batches = [batch(held, rng_eval, args.batch, cfg.seq) for _ in range(args.eval_batches)]
    # One context holds the model, its gradient, AdamW's state and the
    # activations; the collectives and DiLoCo read the same buffers.
    ctx = tc.Context(device_name(args))
    log_device = ctx.device_info().name
    dist = ctx.dist(args.backend, world, rank, args.url, timeout=300)
    n = cfg.size()
    if args.init:
        theta0 = np.load(args.init)  # the shared pretrained checkpoint
    else:
        theta0 = np.zeros(n, np.float32)
        M.init(cfg, theta0, seed=args.seed)  # the same start everywhere (DiLoCo also broadcasts rank 0's)
    theta_buf, grad_buf, net, opt = new_model(args, cfg, ctx, theta0)
    rng = np.random.default_rng([7, rank])
    log = {"train": [], "eval": [], "bytes": 0.0, "outer_bytes": [], "seconds": 0.0, "compute_seconds": 0.0,
           "comm_seconds": 0.0, "eval_seconds": 0.0, "tokens": 0,
           "device": log_device.decode() if isinstance(log_device, bytes) else str(log_device)}
    d = None
    if args.mode == "diloco":
        d = dist.diloco(inner_steps=args.H, outer_lr=args.outer_lr, outer_momentum=args.outer_momentum,
                        outer_optimizer="nesterov", compress=args.compress)
        d.add_parameter("model", theta_buf, n)
    if rank == 0:
        log["eval"].append((0, evaluate(net, eval_batches)))
    t0 = time.time()
    for step in range(args.steps):
        x, y = batch(train, rng, args.batch, cfg.seq)
        tc0 = time.time()
        loss = net.loss_and_grad(x, y)
        tc1 = time.time()
        if args.mode == "ddp":
            dist.allreduce(grad_buf, n, "f32", "avg")
        tc2 = time.time()
        opt.step(lr_at(step, args.lr, args.warmup, args.steps))
        tc3 = time.time()
        if d is not None and d.step():
            d.set_outer_hyperparameters(*outer_rates(args, step))
            d.apply_outer()
            log["outer_bytes"].append(d.last_outer_bytes_sent)
        tc4 = time.time()
        log["compute_seconds"] += (tc1 - tc0) + (tc3 - tc2)
        log["comm_seconds"] += (tc2 - tc1) + (tc4 - tc3)
        log["tokens"] += x.size
        log["train"].append(float(loss))
        if rank == 0 and (step + 1) % args.H == 0:
            te = time.time()
            log["eval"].append((step + 1, evaluate(net, eval_batches)))
            log["eval_seconds"] += time.time() - te
            print("[%s] step %d eval %.4f (%.1fs)" % (args.mode, step + 1, log["eval"][-1][1], time.time() - t0),
                  flush=True)
    log["seconds"] = time.time() - t0
    log["tokens_per_second"] = log["tokens"] / log["seconds"]
    log["compute_tokens_per_second"] = log["tokens"] / max(log["compute_seconds"], 1e-9)
    log["bytes"] = float(sum(log["outer_bytes"])) if d is not None else float(dist.bytes_sent)
    if d is not None:
        d.close()
    if rank == 0:
        np.save(args.save, theta_buf.to_numpy(n, np.float32))
    dist.close()
    ctx.close()
    Path(args.log).write_text(json.dumps(log))


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
               "--init", str(out / "pretrained.npy") if args.pretrain or args.pretrained else "",
               "--log", str(out / ("%s_rank%d.json" % (mode, r))), "--save", str(out / ("%s_theta.npy" % mode))]
        cmd += ["--%s" % k.replace("_", "-") + "=" + str(v) for k, v in vars(args).items()
                if k in SHARED]
        procs.append(subprocess.Popen(cmd, env=env))
    # A worker that fails leaves the others waiting in a collective until its
    # timeout: stop them at once instead.
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            raise SystemExit("%s worker failed" % mode)
        time.sleep(0.2)
    if any(p.returncode != 0 for p in procs):
        raise SystemExit("%s worker failed" % mode)
    return [json.loads((out / ("%s_rank%d.json" % (mode, r))).read_text()) for r in range(args.workers)]


SHARED = ("workers", "steps", "pretrain", "H", "compress", "preset", "dim", "layers", "heads", "ffn", "seq", "batch",
          "lr", "wd", "warmup", "tf32", "stream", "outer_lr", "outer_momentum", "outer_schedule", "eval_batches", "kernels", "rope", "seed", "device",
          "backend", "corpus")


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


def pretrain(args, cfg, train, path):
    """The shared starting checkpoint: `--pretrain` steps of one worker
    (no communication), as DiLoCo's authors start from a pretrained model;
    on the device of the runs (cuda:0 with --device cuda)."""
    import tensorcore as tc
    theta0 = np.zeros(cfg.size(), np.float32)
    M.init(cfg, theta0, seed=args.seed)
    with tc.Context(device_name(args)) as ctx:
        theta_buf, _, net, opt = new_model(args, cfg, ctx, theta0)
        rng = np.random.default_rng(99)
        t0 = time.time()
        for step in range(args.pretrain):
            x, y = batch(train, rng, args.batch, cfg.seq)
            loss = net.loss_and_grad(x, y)
            opt.step(lr_at(step, args.lr, args.warmup, args.pretrain))
        seconds = time.time() - t0
        np.save(path, theta_buf.to_numpy(cfg.size(), np.float32))
    print("pretrained %d steps on one worker: train loss %.4f, %.0f tokens/s" % (
        args.pretrain, loss, args.pretrain * args.batch * cfg.seq / max(seconds, 1e-9)), flush=True)


PROMPTS = {"licenses": b"This program is free software; ", "stdlib": b"def main():\n    "}


def driver(args):
    import tensorcore as tc
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config(args)
    train, held = corpus(args.corpus)
    print("corpus %s: %d train bytes, %d held-out bytes" % (args.corpus, len(train), len(held)))
    print("model: dim %d, %d layers, %d heads, ffn %d, context %d: %d parameters; batch %d x %d tokens per worker "
          "per step; %s%s%s" % (cfg.dim, cfg.layers, cfg.heads, cfg.ffn, cfg.seq, cfg.size(), args.batch, cfg.seq,
                                args.device, ", TF32 products" if args.tf32 == "on" and args.device == "cuda" else "",
                                ", kernels on a stream" if args.stream == "on" else ""),
          flush=True)
    t_start = time.time()
    if args.pretrained:
        shutil.copyfile(args.pretrained, out / "pretrained.npy")
    elif args.pretrain:
        t0 = time.time()
        pretrain(args, cfg, train, out / "pretrained.npy")
        print("pretrain: %.0f s" % (time.time() - t0), flush=True)
    results = {}
    modes = [m for m in ("ddp", "diloco") if m in args.modes.split(",")]
    for mode in modes:
        t0 = time.time()
        results[mode] = run_mode(args, mode, out)
        tps = np.mean([lg["tokens_per_second"] for lg in results[mode]])
        print("%s: %.0f s, %.0f tokens/s per worker" % (mode, time.time() - t0, tps), flush=True)
    if len(results) < 2:
        # One side alone (a sweep against a recorded baseline): its curve only.
        report = {"config": {k: getattr(args, k) for k in SHARED},
                  "final_eval_loss": {m: results[m][0]["eval"][-1][1] for m in results},
                  "bytes_per_worker": {m: float(np.mean([lg["bytes"] for lg in results[m]])) for m in results},
                  "eval_curves": {m: results[m][0]["eval"] for m in results}}
        (out / "report.json").write_text(json.dumps(report, indent=1))
        print(json.dumps({k: report[k] for k in ("final_eval_loss", "bytes_per_worker")}))
        return
    final = {m: results[m][0]["eval"][-1][1] for m in results}
    sent = {m: float(np.mean([lg["bytes"] for lg in results[m]])) for m in results}
    secs = {m: float(np.max([lg["seconds"] for lg in results[m]])) for m in results}
    per_worker = {m: float(np.mean([lg["tokens_per_second"] for lg in results[m]])) for m in results}
    compute_per_worker = {m: float(np.mean([lg["compute_tokens_per_second"] for lg in results[m]])) for m in results}
    comm = {m: float(np.mean([lg["comm_seconds"] for lg in results[m]])) for m in results}
    gap = (final["diloco"] - final["ddp"]) / final["ddp"]
    ratio = sent["ddp"] / max(sent["diloco"], 1.0)
    title = "%d workers, %d steps, H=%d, compress=%s" % (args.workers, args.steps, args.H, args.compress)
    plot(results, out / "diloco_loss.png", title)
    # The DiLoCo model as GGUF, decoded greedily from the file by tensorcore's
    # LLaMA harness (KV cache) up to the trained context length.
    theta = np.load(out / "diloco_theta.npy")
    gguf_path = out / "tiny-llama-diloco.gguf"
    M.save_gguf(cfg, theta, gguf_path)
    prompt = list(PROMPTS[args.corpus])
    # On the CPU whatever the run's device: a file check, as on the machine
    # that recorded the CPU runs.
    new, harness_logits = M.decode_gguf(gguf_path, prompt, cfg.seq - len(prompt), device="cpu")
    text = bytes(prompt + new).decode("utf-8", "replace")
    # The training model on the same sequence, in one forward on the CPU: it
    # decodes the same text greedily iff its argmax reproduces every new token.
    with tc.Context("cpu") as ctx:
        kctx = ctx if args.kernels == "tc" else None
        ours = M.model(cfg, theta, np.zeros_like(theta), kctx).logits(np.array([prompt + new[:-1]]))[0]
    same = [int(t) for t in np.argmax(ours[len(prompt) - 1:], -1)] == new
    logit_diff = float(np.max(np.abs(ours - harness_logits)))
    report = {
        "config": {k: getattr(args, k) for k in SHARED}, "parameters": cfg.size(),
        "corpus": {"name": args.corpus, "train_bytes": len(train), "held_out_bytes": len(held),
                   "python": sys.version.split()[0]},
        "device": results["ddp"][0].get("device", args.device),
        "final_eval_loss": final, "relative_gap": gap, "bytes_per_worker": sent, "bytes_ratio": ratio,
        "best_eval_loss": {m: min(v for _, v in results[m][0]["eval"]) for m in results},
        "train_loss_last_100": {m: float(np.mean([lg["train"][-100:] for lg in results[m]])) for m in results},
        "seconds": secs, "total_wall_seconds": time.time() - t_start,
        "tokens_per_second_per_worker": per_worker, "compute_tokens_per_second_per_worker": compute_per_worker,
        "comm_seconds_per_worker": comm,
        "eval_curves": {m: results[m][0]["eval"] for m in results},
        "gguf": str(gguf_path.name), "gguf_bytes": gguf_path.stat().st_size, "decoded": text,
        "decode_matches_training_model": same, "decode_max_abs_logit_diff": logit_diff,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("parameters", "final_eval_loss", "relative_gap", "bytes_per_worker",
                                            "bytes_ratio", "seconds", "tokens_per_second_per_worker",
                                            "compute_tokens_per_second_per_worker", "decode_matches_training_model",
                                            "decode_max_abs_logit_diff")},
                     indent=1))
    print("decoded from GGUF: %r" % text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--H", type=int, default=100, help="inner steps per DiLoCo outer step")
    ap.add_argument("--compress", default="none")
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS),
                    help="model size, batch, lr, warmup and TF32: small (%s) or gpu (%s); flags given explicitly "
                    "win" % tuple(", ".join("%s %s" % kv for kv in PRESETS[k].items()) for k in ("small", "gpu")))
    ap.add_argument("--dim", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--tf32", choices=["on", "off"],
                    help="let the model's matrix products run on TF32 tensor cores (CUDA; the reorderings and "
                    "one-hot products stay f32)")
    ap.add_argument("--stream", choices=["on", "off"],
                    help="enqueue each forward and backward pass on a stream and wait once, instead of after every "
                    "kernel (default: on with --device cuda, off on the CPU)")
    ap.add_argument("--corpus", choices=["licenses", "stdlib"],
                    help="license texts (default on the CPU) or the standard library's .py sources (default with "
                    "--device cuda)")
    ap.add_argument("--outer-lr", dest="outer_lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", dest="outer_momentum", type=float, default=0.9)
    ap.add_argument("--outer-schedule", dest="outer_schedule", default="constant", choices=["constant", "inner"],
                    help="inner: outer lr and momentum go from the flags' values to plain averaging (1, 0) as the "
                    "inner cosine schedule decays")
    ap.add_argument("--pretrain", type=int, default=0, help="steps of one-worker pretraining both runs start from")
    ap.add_argument("--pretrained", metavar="NPY",
                    help="start both runs from this checkpoint (a previous run's pretrained.npy of the same config) "
                    "instead of pretraining again")
    ap.add_argument("--modes", default="ddp,diloco",
                    help="which runs to make (comma-separated); the comparison needs both")
    ap.add_argument("--init", default="")
    ap.add_argument("--eval-batches", dest="eval_batches", type=int, default=16)
    ap.add_argument("--kernels", default="tc", choices=["tc", "numpy"],
                    help="forward/backward and AdamW on tensorcore's kernels, or the NumPy reference")
    ap.add_argument("--rope", default="half", choices=["half", "interleaved"],
                    help="RoPE pairs (k, k + hd/2), as the recorded runs (Wq/Wk are permuted into GGUF's order on "
                    "export), or (2k, 2k+1) as GGUF")
    ap.add_argument("--seed", type=int, default=0, help="of the initial weights")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where each worker trains: model, gradient, AdamW and the buffers the collectives and "
                    "DiLoCo see (gloo: every worker on cuda:0; nccl: worker r on cuda:r)")
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
    if args.kernels == "numpy" and args.device != "cpu":
        ap.error("--kernels numpy runs on the CPU (--device cpu)")
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, ("on" if v else "off") if k == "tf32" else v)
    if args.corpus is None:
        args.corpus = "licenses" if args.device == "cpu" else "stdlib"
    if args.stream is None:
        args.stream = "off" if args.device == "cpu" else "on"
    (worker if args.role == "worker" else driver)(args)


if __name__ == "__main__":
    main()
