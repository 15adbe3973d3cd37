"""One rank of a multi-process test of test_dist.py.

    python dist_worker.py SCENARIO RANK WORLD URL SEED [extra]

Every rank derives every rank's inputs from SEED, so it checks its own
results against a float64 NumPy reference without talking to the others.
Exit status 0 means every check passed; failures print what differed.
Scenario-specific outcomes are printed as "RESULT key=value" lines.
"""

import hashlib
import os
import socket
import sys
import time

import numpy as np

import tensorcore as tc

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}
TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL rank %s: %s" % (RANK, what), flush=True)


def result(**kv):
    print("RESULT " + " ".join("%s=%s" % item for item in kv.items()), flush=True)


def data(seed, rank, n, dtype, salt=0):
    rng = np.random.default_rng([seed, rank, salt])
    return rng.standard_normal(n).astype(NP[dtype])


def close(got, ref, dtype, scale=1.0):
    got = got.astype(np.float64)
    return np.all(np.isfinite(got)) and np.allclose(got, ref, rtol=TOL[dtype], atol=TOL[dtype] * scale)


def keys_for(world, bad_rank=-1):
    """One identity and key per rank (rank r's secret derived from r)."""
    keys = []
    for r in range(world):
        secret = bytes([(r * 37 + i) % 251 for i in range(40)])
        keys.append(("rank-%d" % r, 100 + r, secret))
    return keys


def my_keyring(world, rank, wrong=False):
    keys = keys_for(world)
    if wrong:
        ident, kid, _ = keys[rank]
        keys = [k for k in keys if k[0] != ident] + [(ident, kid, b"\xee" * 40)]
    return keys


# ---- scenarios ---------------------------------------------------------------------

def collectives(ctx, d, seed):
    world, rank = d.world_size, d.rank
    check(world == WORLD and rank == RANK, "world/rank properties")
    n = 1000 + 7  # not a multiple of anything
    ops = {"sum": lambda xs: np.sum(xs, 0), "avg": lambda xs: np.mean(xs, 0), "max": lambda xs: np.max(xs, 0),
           "min": lambda xs: np.min(xs, 0)}
    for dtype in ("f32", "f16", "bf16"):
        if NP[dtype] is None:
            continue
        for salt, (op, ref_fn) in enumerate(ops.items()):
            xs = [data(seed, r, n, dtype, salt) for r in range(world)]
            buf = ctx.buffer_from_array(xs[rank])
            d.allreduce(buf, n, dtype=dtype, op=op)
            ref = ref_fn(np.stack([x.astype(np.float64) for x in xs]))
            check(close(buf.to_numpy((n,), NP[dtype]), ref, dtype, scale=world), "allreduce %s %s" % (dtype, op))
            # reduce_scatter: every rank contributes world blocks.
            m = 129
            ys = [data(seed, r, m * world, dtype, 10 + salt) for r in range(world)]
            src = ctx.buffer_from_array(ys[rank])
            dst = ctx.buffer_from_array(np.full(m, np.nan, NP[dtype]))
            d.reduce_scatter(src, dst, m, dtype=dtype, op=op)
            ref = ref_fn(np.stack([y.astype(np.float64) for y in ys]))[rank * m:(rank + 1) * m]
            check(close(dst.to_numpy((m,), NP[dtype]), ref, dtype, scale=world), "reduce_scatter %s %s" % (dtype, op))
        root = world - 1
        x = data(seed, root, n, dtype, 99) if rank == root else np.full(n, np.nan, NP[dtype])
        buf = ctx.buffer_from_array(x)
        d.broadcast(buf, n, dtype=dtype, root=root)
        check(np.array_equal(buf.to_numpy((n,), NP[dtype]).view(np.uint8),
                             data(seed, root, n, dtype, 99).view(np.uint8)), "broadcast %s bits" % dtype)
        src = ctx.buffer_from_array(data(seed, rank, n, dtype, 42))
        dst = ctx.buffer_from_array(np.full(n * world, np.nan, NP[dtype]))
        d.allgather(src, dst, n, dtype=dtype)
        ref = np.concatenate([data(seed, r, n, dtype, 42) for r in range(world)])
        check(np.array_equal(dst.to_numpy((n * world,), NP[dtype]).view(np.uint8), ref.view(np.uint8)),
              "allgather %s bits" % dtype)
    d.barrier()
    # One allreduce of 4000 f32 sends 2 (n-1)/n * 16000 bytes on a ring.
    before = d.bytes_sent
    d.allreduce(ctx.buffer_from_array(np.ones(4000, np.float32)), 4000)
    check(d.bytes_sent - before == 2 * (world - 1) * 16000 // world, "bytes_sent counts the ring's bytes")


def scenario_nccl(ctx, url, seed, extra):
    """The same checks on CUDA buffers of one GPU per rank, through NCCL."""
    with ctx.dist("nccl", WORLD, RANK, url, timeout=60) as d:
        collectives(ctx, d, seed)


def scenario_collectives(ctx, url, seed, extra):
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as d:
        collectives(ctx, d, seed)


def scenario_collectives_large(ctx, url, seed, extra):
    """Buffers of several 4 MiB staging chunks and a partial one, so that a
    staged collective (device memory, or TC_DIST_DEVICE_PATH=1) pipelines
    chunks and puts each back at its place; outputs NaN-poisoned first."""
    world, rank = WORLD, RANK
    chunk = 4 << 20
    with ctx.dist("gloo", world, rank, url, timeout=60) as d:
        for dtype, op, salt in (("f32", "sum", 1), ("f16", "avg", 2), ("bf16", "max", 3)):
            if NP[dtype] is None:
                continue
            esz = NP[dtype].itemsize
            n = 2 * chunk // esz + 12345  # three chunks, the last one partial
            xs = [data(seed, r, n, dtype, salt) for r in range(world)]
            buf = ctx.buffer_from_array(xs[rank])
            d.allreduce(buf, n, dtype=dtype, op=op)
            stack = np.stack([x.astype(np.float64) for x in xs])
            ref = {"sum": np.sum, "avg": np.mean, "max": np.max}[op](stack, 0)
            check(close(buf.to_numpy((n,), NP[dtype]), ref, dtype, scale=world), "large allreduce %s %s" % (dtype, op))
        n = 2 * chunk // 4 + 777
        root = world - 1
        x = data(seed, root, n, "f32", 9) if rank == root else np.full(n, np.nan, np.float32)
        buf = ctx.buffer_from_array(x)
        d.broadcast(buf, n, root=root)
        check(np.array_equal(buf.to_numpy((n,), np.float32).view(np.uint32), data(seed, root, n, "f32", 9).view(np.uint32)),
              "large broadcast bits")
        # Every rank's block spans several chunks of chunk / world bytes.
        m = 2 * chunk // (4 * world) + 333
        src = ctx.buffer_from_array(data(seed, rank, m, "f32", 11))
        dst = ctx.buffer_from_array(np.full(m * world, np.nan, np.float32))
        d.allgather(src, dst, m)
        ref = np.concatenate([data(seed, r, m, "f32", 11) for r in range(world)])
        check(np.array_equal(dst.to_numpy((m * world,), np.float32).view(np.uint32), ref.view(np.uint32)),
              "large allgather bits")
        ys = [data(seed, r, m * world, "f32", 12) for r in range(world)]
        src = ctx.buffer_from_array(ys[rank])
        dst = ctx.buffer_from_array(np.full(m, np.nan, np.float32))
        d.reduce_scatter(src, dst, m, op="sum")
        ref = np.sum(np.stack([y.astype(np.float64) for y in ys]), 0)[rank * m:(rank + 1) * m]
        check(close(dst.to_numpy((m,), np.float32), ref, "f32", scale=world), "large reduce_scatter")


def scenario_file(ctx, url, seed, extra):
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as d:
        x = ctx.buffer_from_array(np.full(10, RANK + 1, np.float32))
        d.allreduce(x, 10)
        check(np.all(x.to_numpy((10,), np.float32) == WORLD * (WORLD + 1) / 2), "file:// allreduce")


def scenario_auth(ctx, url, seed, extra):
    """Per-rank identities bound to ranks; extra == 'legacy' uses the original argument order."""
    keys = my_keyring(WORLD, RANK)
    ids = ["rank-%d" % r for r in range(WORLD)]
    if extra == "legacy":
        d = tc.dist_init_authenticated(ctx, "gloo", WORLD, RANK, url + "?timeout_ms=20000", ids, ids[RANK],
                                       100 + RANK, keys)
    else:
        d = ctx.dist_authenticated("gloo", WORLD, RANK, url, keys, rank_identities=ids,
                                   local_identity=ids[RANK], timeout=20)
    with d:
        x = ctx.buffer_from_array(np.full(16, RANK + 1, np.float32))
        d.allreduce(x, 16)
        check(np.all(x.to_numpy((16,), np.float32) == WORLD * (WORLD + 1) / 2), "authenticated allreduce")
        d.barrier()
        result(failures=d.auth_failure_count)
        d.barrier()  # rank 0 reports only after the others are done with the store


def scenario_auth_impostor(ctx, url, seed, extra):
    """Claims rank `extra` with a wrong secret: must be refused with TC_ERR_AUTH."""
    rank = int(extra)
    ids = ["rank-%d" % r for r in range(WORLD)]
    try:
        ctx.dist_authenticated("gloo", WORLD, rank, url, my_keyring(WORLD, rank, wrong=True),
                               rank_identities=ids, local_identity=ids[rank], timeout=5)
        check(False, "impostor was admitted")
    except tc.TensorcoreError as e:
        result(status=e.status)
        check(e.status == tc.TC_ERR_AUTH, "impostor got %r" % e)


def scenario_auth_bad(ctx, url, seed, extra):
    """Rank WORLD-1 holds a wrong key: it is refused; the others time out clearly."""
    wrong = RANK == WORLD - 1
    ids = ["rank-%d" % r for r in range(WORLD)]
    t0 = time.time()
    try:
        ctx.dist_authenticated("gloo", WORLD, RANK, url, my_keyring(WORLD, RANK, wrong=wrong), rank_identities=ids,
                               local_identity=ids[RANK], timeout=3)
        check(False, "group formed although rank %d has a wrong key" % (WORLD - 1))
    except tc.TensorcoreError as e:
        result(status=e.status, seconds="%.2f" % (time.time() - t0))
        if wrong:
            check(e.status == tc.TC_ERR_AUTH, "refused rank got %r" % e)
        else:
            check(e.status == tc.TC_ERR_TIMEOUT, "waiting rank got %r" % e)
            if RANK == 0:
                check("authentication" in e.detail, "rank 0's error names the refusal: %r" % e.detail)


def scenario_mesh(ctx, url, seed, extra):
    ports = extra.split(",")
    urls = ["tcp://127.0.0.1:%s" % p for p in ports]
    ids = ["mesh/rank-%d" % r for r in range(WORLD)]
    keys = [(ids[r], 300 + r, bytes([r + 1]) * 32) for r in range(WORLD)]
    with tc.mesh_group_init_authenticated(ctx, WORLD, RANK, urls, ids, ids[RANK], 300 + RANK, keys) as g:
        x = ctx.buffer_from_array(np.full(16, RANK + 1, np.float32))
        g.allreduce(x, 16)
        check(np.all(x.to_numpy((16,), np.float32) == WORLD * (WORLD + 1) / 2), "mesh allreduce")


def scenario_listener(ctx, url, seed, extra):
    """Once the group has formed, rank 0's rendezvous listener is closed: a
    connect to its port is refused by the system, and the group works on."""
    port = int(url.rsplit(":", 1)[1])
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as d:
        d.barrier()  # rank 0 closed the listener before its rendezvous returned
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            refused = 0
        except ConnectionRefusedError:
            refused = 1
        result(refused=refused)
        x = ctx.buffer_from_array(np.full(16, RANK + 1, np.float32))
        d.allreduce(x, 16)
        check(np.all(x.to_numpy((16,), np.float32) == WORLD * (WORLD + 1) / 2), "allreduce after the listener closed")


def scenario_refusals(ctx, url, seed, extra):
    """An authenticated group; rank 1 reaches the rendezvous through `extra`
    (a proxy that alters one reply). Prints this rank's refusal counters
    once the group has formed."""
    keys = my_keyring(WORLD, RANK)
    ids = ["rank-%d" % r for r in range(WORLD)]
    with ctx.dist_authenticated("gloo", WORLD, RANK, extra if RANK == 1 else url, keys, rank_identities=ids,
                                local_identity=ids[RANK], timeout=20) as d:
        x = ctx.buffer_from_array(np.full(16, RANK + 1, np.float32))
        d.allreduce(x, 16)
        check(np.all(x.to_numpy((16,), np.float32) == WORLD * (WORLD + 1) / 2), "allreduce after a refusal")
        result(refusals=d.refusal_count, auth=d.auth_failure_count, last=d.last_refusal.replace(" ", "_"))


def scenario_death(ctx, url, seed, extra):
    """After a first allreduce, the last rank dies ('exit') or goes silent ('hang')."""
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as d:
        x = ctx.buffer_from_array(np.ones(64, np.float32))
        d.allreduce(x, 64)
        d.timeout = 1.5
        if RANK == WORLD - 1:
            if extra == "exit":
                os._exit(0)
            time.sleep(3.5)
            os._exit(0)
        t0 = time.time()
        try:
            d.allreduce(x, 64)
            check(False, "allreduce with a dead peer returned")
        except tc.TensorcoreError as e:
            result(status=e.status, seconds="%.2f" % (time.time() - t0))
            check(e.status == tc.TC_ERR_TIMEOUT, "dead peer gave %r" % e)
        try:
            d.barrier()
            check(False, "a broken group accepted a barrier")
        except tc.TensorcoreError as e:
            check(e.status == tc.TC_ERR_TIMEOUT, "broken group gave %r" % e)


def flat_theta(bufs, sizes):
    return np.concatenate([b.to_numpy((n,), np.float32) for b, n in zip(bufs, sizes)])


def scenario_diloco(ctx, url, seed, extra):
    """Anchors identical on every rank after every outer step, for every
    optimizer and compression; NONE + each optimizer also against NumPy."""
    sizes = [300, 77]
    H = 3
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as dist:
        gather = ctx.buffer(4 * sum(sizes) * WORLD)
        for opt in ("sgd", "nesterov", "adam"):
            for comp in ("none", "fp16", "topk_1pct", "topk_01pct"):
                for async_overlap in (False, True):
                    if comp != "none" and opt == "adam" and async_overlap:
                        continue  # keep the suite short; covered by the other pairs
                    run_diloco(ctx, dist, gather, sizes, H, opt, comp, async_overlap, seed)


def run_diloco(ctx, dist, gather, sizes, H, opt, comp, async_overlap, seed):
    tag = "%s/%s/%s" % (opt, comp, "async" if async_overlap else "sync")
    total = sum(sizes)
    # Every rank starts from its own values; add_parameter broadcasts rank 0's.
    init = [data(seed, RANK, n, "f32", 500 + i) for i, n in enumerate(sizes)]
    bufs = [ctx.buffer_from_array(v) for v in init]
    lr, mu, b2, eps = 0.7, 0.9, 0.99, 1e-8
    with dist.diloco(inner_steps=H, outer_lr=lr, outer_momentum=mu, outer_beta2=b2, outer_eps=eps,
                     outer_optimizer=opt, compress=comp, async_overlap=async_overlap) as d:
        for i, (b, n) in enumerate(zip(bufs, sizes)):
            d.add_parameter("p%d" % i, b, n)
        anchor = np.concatenate([data(seed, 0, n, "f32", 500 + i) for i, n in enumerate(sizes)]).astype(np.float64)
        check(np.array_equal(flat_theta(bufs, sizes), anchor.astype(np.float32)), tag + ": rank 0's start broadcast")
        v = np.zeros(total)
        m = np.zeros(total)
        t = 0
        for outer in range(3):
            for step in range(H):
                # A deterministic "inner step" different on every rank.
                for i, (b, n) in enumerate(zip(bufs, sizes)):
                    g = data(seed, RANK, n, "f32", 1000 * outer + 10 * step + i) * 0.01
                    b.write(b.to_numpy((n,), np.float32) - g)
                due = d.step()
                check(due == (step == H - 1), tag + ": step() is due every H steps")
            d.apply_outer()
            if async_overlap:
                state, status, rid = d.async_poll()
                check(state in (tc.TC_DILOCO_ASYNC_RUNNING, tc.TC_DILOCO_ASYNC_READY), tag + ": poll state")
                d.async_wait()
                state, status, rid = d.async_poll()
                check(state == tc.TC_DILOCO_ASYNC_READY and status == 0 and rid == outer + 1, tag + ": ready")
                d.async_commit()
                check(d.async_poll()[0] == tc.TC_DILOCO_ASYNC_IDLE, tag + ": idle after commit")
            check(d.outer_steps_completed == outer + 1, tag + ": outer_steps_completed")
            theta = flat_theta(bufs, sizes)
            # No local progress between launch and commit: theta is the anchor.
            src = ctx.buffer_from_array(theta)
            dist.allgather(src, gather, total)
            allt = gather.to_numpy((WORLD, total), np.float32)
            check(all(np.array_equal(allt[0].view(np.uint32), allt[r].view(np.uint32)) for r in range(WORLD)),
                  tag + ": anchors identical on every rank after outer step %d" % outer)
            if comp == "none":
                # The deltas as the library sees them: f32 inner steps and an
                # f32 difference (in f64, cancellation in a near-zero delta
                # could flip its sign, and Adam's step follows the sign).
                deltas = []
                anchor32 = anchor.astype(np.float32)
                for r in range(WORLD):
                    th = anchor32.copy()
                    for step in range(H):
                        th -= np.concatenate([data(seed, r, n, "f32", 1000 * outer + 10 * step + i) * np.float32(0.01)
                                              for i, n in enumerate(sizes)]).astype(np.float32)
                    deltas.append((anchor32 - th).astype(np.float64))
                g = np.mean(deltas, 0)
                if opt == "sgd":
                    anchor = anchor - lr * g
                elif opt == "nesterov":
                    v = mu * v + g
                    anchor = anchor - lr * (g + mu * v)
                else:
                    t += 1
                    m = mu * m + (1 - mu) * g
                    v = b2 * v + (1 - b2) * g * g
                    anchor = anchor - lr * (m / (1 - mu ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
                tol = 1e-3 if opt == "adam" else 1e-5
                check(np.allclose(theta, anchor, rtol=tol, atol=tol), tag + ": matches the NumPy outer step %d (max "
                      "err %g)" % (outer, np.max(np.abs(theta - anchor))))
                anchor = theta.astype(np.float64)  # each outer step is checked from the library's own anchor
            else:
                anchor = theta.astype(np.float64)
            wire = d.last_outer_bytes_sent
            dense = 2 * (WORLD - 1) * 4 * total / WORLD
            if comp == "none":
                check(wire == dense, tag + ": bytes %g == %g" % (wire, dense))
            elif comp == "fp16":
                check(wire == dense / 2, tag + ": fp16 bytes")
            else:
                k = max(1, int(np.ceil(total * (0.01 if comp == "topk_1pct" else 0.001))))
                check(wire == (WORLD - 1) * 8 * k, tag + ": top-k bytes %g" % wire)
        check(d.inner_steps_completed == 3 * H, tag + ": inner_steps_completed")


def scenario_diloco_state(ctx, url, seed, extra):
    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as dist:
        diloco_state(ctx, dist, seed)


def scenario_diloco_nccl(ctx, url, seed, extra):
    """DiLoCo on an NCCL group (one GPU per rank): the outer exchange goes
    through device scratch; the same checks as on gloo."""
    sizes = [300, 77]
    with ctx.dist("nccl", WORLD, RANK, url, timeout=60) as dist:
        gather = ctx.buffer(4 * sum(sizes) * WORLD)
        for opt in ("sgd", "nesterov", "adam"):
            for comp in ("none", "fp16", "topk_1pct"):
                for async_overlap in (False, True):
                    run_diloco(ctx, dist, gather, sizes, 3, opt, comp, async_overlap, seed)
        diloco_state(ctx, dist, seed)


def diloco_state(ctx, dist, seed):
    """Serialize after 2 outer steps, continue 2 more; a fresh context
    restored from the blob continues bit-identically. Prints each case's
    final parameters' SHA-256 (RESULT), so two runs can be compared."""
    sizes = [200, 33]
    H = 2
    digests = {}

    def inner(bufs, outer, step):
        for i, (b, n) in enumerate(zip(bufs, sizes)):
            g = data(seed, RANK, n, "f32", 1000 * outer + 10 * step + i) * 0.01
            b.write(b.to_numpy((n,), np.float32) - g)

    for opt, comp in (("nesterov", "topk_1pct"), ("adam", "fp16"), ("sgd", "none")):
        if True:
            bufs = [ctx.buffer_from_array(data(seed, 0, n, "f32", 7 + i)) for i, n in enumerate(sizes)]
            with dist.diloco(inner_steps=H, outer_optimizer=opt, compress=comp, outer_lr=0.8) as d:
                for i, (b, n) in enumerate(zip(bufs, sizes)):
                    d.add_parameter("p%d" % i, b, n)
                d.set_epochs(5, 9)
                for outer in range(2):
                    for step in range(H):
                        inner(bufs, outer, step)
                        if d.step():
                            d.apply_outer()
                inner(bufs, 2, 0)  # mid-round: one inner step since the last outer
                d.step()
                blob = d.serialize_state()
                blob1 = d.serialize_state(tc.TC_DILOCO_STATE_ABI_VERSION_1)
                check(blob[:8] == b"TCDLSTA2" and blob1[:8] == b"TCDLSTA1", "magics")
                saved = [b.to_numpy((n,), np.float32) for b, n in zip(bufs, sizes)]
                for outer in range(2, 4):
                    for step in range(H):
                        if not (outer == 2 and step == 0):
                            inner(bufs, outer, step)
                            if d.step():
                                d.apply_outer()
                final_a = flat_theta(bufs, sizes)
                digests["%s_%s" % (opt, comp)] = hashlib.sha256(final_a.tobytes()).hexdigest()
                counters_a = (d.outer_steps_completed, d.inner_steps_completed)
            for version, b in ((tc.TC_DILOCO_STATE_ABI_VERSION_2, blob), (tc.TC_DILOCO_STATE_ABI_VERSION_1, blob1)):
                bufs2 = [ctx.buffer_from_array(np.zeros(n, np.float32)) for n in sizes]
                with dist.diloco(inner_steps=H, outer_optimizer=opt, compress=comp, outer_lr=0.8) as d2:
                    for i, (bb, n) in enumerate(zip(bufs2, sizes)):
                        d2.add_parameter("p%d" % i, bb, n)
                    for bb, s in zip(bufs2, saved):
                        bb.write(s)  # the caller restores its parameters
                    d2.deserialize_state(b, version)
                    check(d2.get_epochs() == (5, 9), "epochs restored")
                    for outer in range(2, 4):
                        for step in range(H):
                            if not (outer == 2 and step == 0):
                                inner(bufs2, outer, step)
                                if d2.step():
                                    d2.apply_outer()
                    final_b = flat_theta(bufs2, sizes)
                    check(np.array_equal(final_a.view(np.uint32), final_b.view(np.uint32)),
                          "%s/%s v%d: restored training is bit-identical" % (opt, comp, version))
                    check((d2.outer_steps_completed, d2.inner_steps_completed) == counters_a, "counters restored")
    result(**digests)


def scenario_diloco_kill(ctx, url, seed, extra):
    """DiLoCo on gloo with a checkpoint (state blob and parameters, written
    atomically) after every outer step. extra = MODE:DIR. full: 5 outer
    steps; kill / hang: the last rank dies (or goes silent for 12 s, then
    dies) just before the exchange of outer step 3, and the others report
    the error (the group timeout is 5 s); resume: from the checkpoints to
    the end. Final parameters in DIR/final-RANK.npy."""
    mode, ckpt = extra.split(":", 1)
    sizes, H, outers = [200, 33], 2, 5

    def inner(bufs, outer, step):
        for i, (b, n) in enumerate(zip(bufs, sizes)):
            g = data(seed, RANK, n, "f32", 1000 * outer + 10 * step + i) * 0.01
            b.write(b.to_numpy((n,), np.float32) - g)

    def save(name, blob, theta):
        for suffix, write in ((".bin", lambda f: f.write(blob)), (".npy", lambda f: np.save(f, theta))):
            tmp = os.path.join(ckpt, "%s-%d%s.tmp" % (name, RANK, suffix))
            with open(tmp, "wb") as f:
                write(f)
            os.replace(tmp, os.path.join(ckpt, "%s-%d%s" % (name, RANK, suffix)))

    with ctx.dist("gloo", WORLD, RANK, url, timeout=20) as dist:
        dist.timeout = 5.0  # DiLoCo's exchange takes the group's timeout when it is made
        bufs = [ctx.buffer_from_array(data(seed, 0, n, "f32", 7 + i)) for i, n in enumerate(sizes)]
        with dist.diloco(inner_steps=H, outer_optimizer="nesterov", compress="topk_1pct", outer_lr=0.8) as d:
            for i, (b, n) in enumerate(zip(bufs, sizes)):
                d.add_parameter("p%d" % i, b, n)
            start = 0
            if mode == "resume":
                theta = np.load(os.path.join(ckpt, "ckpt-%d.npy" % RANK))
                for b, piece in zip(bufs, np.split(theta, np.cumsum(sizes)[:-1])):
                    b.write(piece)  # the caller restores its parameters
                with open(os.path.join(ckpt, "ckpt-%d.bin" % RANK), "rb") as f:
                    d.deserialize_state(f.read())
                start = d.outer_steps_completed
                result(resumed_at=start)
            for outer in range(start, outers):
                for step in range(H):
                    inner(bufs, outer, step)
                    if mode in ("kill", "hang") and outer == 3 and step == H - 1:
                        if RANK == WORLD - 1:
                            if mode == "hang":
                                time.sleep(12)
                            os._exit(9)
                        t0 = time.time()
                        try:
                            if d.step():
                                d.apply_outer()
                            check(False, "an outer step with a dead peer returned")
                        except tc.TensorcoreError as e:
                            result(status=e.status, seconds="%.2f" % (time.time() - t0))
                            print("ERROR " + str(e).replace("\n", " "), flush=True)
                        print("DONE rank %d failures %d" % (RANK, len(FAILURES)), flush=True)
                        os._exit(1 if FAILURES else 0)  # the group is broken: nothing to close cleanly
                    if d.step():
                        d.apply_outer()
                save("ckpt", d.serialize_state(), flat_theta(bufs, sizes))
            np.save(os.path.join(ckpt, "final-%d.npy" % RANK), flat_theta(bufs, sizes))


def main():
    global RANK, WORLD
    scenario, RANK, WORLD, url, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    extra = sys.argv[6] if len(sys.argv) > 6 else ""
    # TC_TEST_DIST_DEVICE: the context of the gloo scenarios (e.g. "cuda":
    # gloo on device buffers, staged through the host).
    device = "cuda:%d" % RANK if scenario.endswith("nccl") else os.environ.get("TC_TEST_DIST_DEVICE", "cpu")
    with tc.Context(device) as ctx:
        globals()["scenario_" + scenario](ctx, url, seed, extra)
    print("DONE rank %d failures %d" % (RANK, len(FAILURES)), flush=True)
    sys.exit(1 if FAILURES else 0)


RANK = WORLD = 0
if __name__ == "__main__":
    main()
