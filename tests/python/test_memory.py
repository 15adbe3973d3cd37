"""Activation checkpointing, memory tiers and the HIP/TensorOps diagnostics
through the Python binding: Python recompute callables (an exception
included), threads, bit-exact tier round trips, errors, usage numbers,
budgets, a full disk and an unwritable spill directory."""

import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tensorcore as tc
from conftest import assert_close, poison, rand_f32

L0, L1, L3 = tc.TC_TIER_L0_DEVICE, tc.TC_TIER_L1_HOST_RAM, tc.TC_TIER_L3_LOCAL_NVME


@pytest.fixture
def spill(tmp_path):
    d = tmp_path / "spill"
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)


def spill_files(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def f32_buffer(ctx, arr):
    return ctx.buffer_from_array(np.ascontiguousarray(arr, dtype=np.float32))


# ---- checkpointing ------------------------------------------------------------------

class Activation:
    """H = X @ W kept in a tensorcore buffer, recomputable by checkpoint_realize."""

    def __init__(self, ctx, rng, M=24, K=32, N=40):
        self.ctx, self.M, self.K, self.N = ctx, M, K, N
        self.x, self.w = rand_f32(rng, (M, K)), rand_f32(rng, (K, N))
        self.X, self.W = f32_buffer(ctx, self.x), f32_buffer(ctx, self.w)
        self.H = ctx.buffer_from_array(poison(M * N * 4))
        self.calls = 0

    def recompute(self, user_data):
        self.calls += 1
        assert user_data == "payload"
        self.ctx.gemm(self.X, self.W, self.H, self.M, self.N, self.K, dtype="f32", accum="f32")

    def check(self):
        ref = self.x.astype(np.float64) @ self.w.astype(np.float64)
        scale = np.abs(self.x).astype(np.float64) @ np.abs(self.w).astype(np.float64)
        assert_close(self.H.to_numpy((self.M, self.N), np.float32), ref, scale, 1e-5, "H")


def test_checkpoint_discard_and_realize_with_a_python_callable(ctx, rng):
    act = Activation(ctx, rng)
    act.recompute("payload")
    before = act.H.to_numpy((act.M, act.N), np.float32)
    base = (tc.checkpoint_count_resident(), tc.checkpoint_count_discarded(), tc.checkpoint_total_bytes_discarded())
    cid = tc.checkpoint_register(act.H, act.recompute, "payload")
    assert tc.checkpoint_is_resident(cid)
    used, _ = ctx.memory_tier_usage(L0)
    tc.checkpoint_discard(cid)
    assert not tc.checkpoint_is_resident(cid)
    assert ctx.memory_tier_usage("l0")[0] == used - act.H.nbytes
    assert tc.checkpoint_total_bytes_discarded() == base[2] + act.H.nbytes
    assert tc.checkpoint_count_discarded() == base[1] + 1
    assert act.H.size() == act.M * act.N * 4  # the handle stays
    with pytest.raises(tc.TensorcoreError) as e:
        act.H.to_numpy((act.M, act.N), np.float32)
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "discarded" in e.value.detail
    with pytest.raises(tc.TensorcoreError) as e:
        ctx.gemm(act.X, act.W, act.H, act.M, act.N, act.K, dtype="f32")
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "buffer C" in e.value.detail
    tc.checkpoint_realize(cid)
    assert act.calls == 2 and tc.checkpoint_is_resident(cid)
    np.testing.assert_array_equal(act.H.to_numpy((act.M, act.N), np.float32), before)
    act.check()
    tc.checkpoint_realize(cid)  # resident: nothing runs
    assert act.calls == 2
    tc.checkpoint_unregister(cid)
    assert (tc.checkpoint_count_resident(), tc.checkpoint_count_discarded(),
            tc.checkpoint_total_bytes_discarded()) == base


def test_exception_in_the_callback_leaves_the_buffer_discarded(ctx, rng):
    act = Activation(ctx, rng)
    failing = {"on": True}

    def recompute(user_data):
        if failing["on"]:
            raise ValueError("boom in recompute")
        act.recompute(user_data)

    cid = tc.checkpoint_register(act.H, recompute, "payload")
    tc.checkpoint_discard(cid)
    used = ctx.memory_tier_usage(L0)[0]
    with pytest.raises(tc.TensorcoreError) as e:
        tc.checkpoint_realize(cid)
    assert e.value.status == tc.TC_ERR_INTERNAL
    assert isinstance(e.value.__cause__, ValueError)
    assert "boom in recompute" in str(e.value) and "ValueError" in str(e.value)
    assert not tc.checkpoint_is_resident(cid)
    assert ctx.memory_tier_usage(L0)[0] == used  # what realize allocated is freed again
    with pytest.raises(tc.TensorcoreError):
        act.H.to_numpy((act.M, act.N), np.float32)
    failing["on"] = False
    tc.checkpoint_realize(cid)
    act.check()
    act.H.close()  # freeing a registered buffer unregisters it
    assert not tc.checkpoint_is_resident(cid)
    with pytest.raises(tc.TensorcoreError):
        tc.checkpoint_realize(cid)


def test_callback_status_returns(cpu_ctx):
    buf = cpu_ctx.buffer(64)
    answers = iter([tc.TC_ERR_DISPATCH, 7, "not a status", True, None])
    cid = tc.checkpoint_register(buf, lambda _: next(answers))
    tc.checkpoint_discard(cid)
    with pytest.raises(tc.TensorcoreError) as e:
        tc.checkpoint_realize(cid)
    assert e.value.status == tc.TC_ERR_DISPATCH and "recompute callback" in e.value.detail
    with pytest.raises(tc.TensorcoreError) as e:  # positive: not a status
        tc.checkpoint_realize(cid)
    assert e.value.status == tc.TC_ERR_INTERNAL
    for _ in range(2):  # wrong return types
        with pytest.raises(tc.TensorcoreError) as e:
            tc.checkpoint_realize(cid)
        assert isinstance(e.value.__cause__, TypeError)
    tc.checkpoint_realize(cid)
    assert tc.checkpoint_is_resident(cid)
    tc.checkpoint_unregister(cid)


def test_checkpoint_errors(cpu_ctx):
    buf = cpu_ctx.buffer(64)
    cid = tc.checkpoint_register(buf, lambda _: None)
    with pytest.raises(tc.TensorcoreError) as e:
        tc.checkpoint_register(buf, lambda _: None)
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "already registered" in e.value.detail
    with pytest.raises(TypeError):
        tc.checkpoint_register(cpu_ctx.buffer(8), "not callable")
    host = np.zeros(16, dtype=np.uint8)
    wrapped = cpu_ctx.buffer_from_ptr(host, host.nbytes)
    with pytest.raises(tc.TensorcoreError) as e:
        tc.checkpoint_register(wrapped, lambda _: None)
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "buffer_from_ptr" in e.value.detail
    bogus = 2**64 - 1
    for fn in (tc.checkpoint_discard, tc.checkpoint_realize, tc.checkpoint_unregister):
        with pytest.raises(tc.TensorcoreError) as e:
            fn(bogus)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(tc.TensorcoreError):
        tc.checkpoint_discard(-1)
    assert tc.checkpoint_is_resident(bogus) is False
    closed = cpu_ctx.buffer(8)
    closed.close()
    with pytest.raises(tc.TensorcoreError):
        tc.checkpoint_register(closed, lambda _: None)
    tc.checkpoint_unregister(cid)


def test_callback_may_realize_other_checkpoints_but_not_its_own(cpu_ctx):
    a, b = cpu_ctx.buffer(64), cpu_ctx.buffer(64)
    seen = {}
    ids = {}

    def recompute_a(_):
        with pytest.raises(tc.TensorcoreError) as e:
            tc.checkpoint_realize(ids["a"])
        seen["self"] = e.value.status
        tc.checkpoint_realize(ids["b"])
        seen["other"] = tc.checkpoint_is_resident(ids["b"])

    ids["a"] = tc.checkpoint_register(a, recompute_a)
    ids["b"] = tc.checkpoint_register(b, lambda _: b.write(np.arange(16, dtype=np.float32)))
    tc.checkpoint_discard(ids["a"])
    tc.checkpoint_discard(ids["b"])
    tc.checkpoint_realize(ids["a"])
    assert seen == {"self": tc.TC_ERR_INVALID_ARG, "other": True}
    np.testing.assert_array_equal(b.to_numpy(16, np.float32), np.arange(16, dtype=np.float32))
    for i in ids.values():
        tc.checkpoint_unregister(i)


def test_checkpointing_from_many_threads(ctx, rng):
    shared = [Activation(ctx, rng, M=8, K=8, N=8) for _ in range(2)]
    shared_ids = [tc.checkpoint_register(a.H, a.recompute, "payload") for a in shared]
    errors = []

    def worker(seed):
        try:
            local_rng = np.random.default_rng(seed)
            mine = Activation(ctx, local_rng, M=8, K=8, N=8)
            cid = tc.checkpoint_register(mine.H, mine.recompute, "payload")
            for _ in range(40):
                sid = shared_ids[int(local_rng.integers(len(shared_ids)))]
                (tc.checkpoint_discard if local_rng.integers(2) else tc.checkpoint_realize)(sid)
                tc.checkpoint_discard(cid)
                assert not tc.checkpoint_is_resident(cid)
                tc.checkpoint_realize(cid)
                mine.check()
            assert mine.calls == 40
            tc.checkpoint_unregister(cid)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(100 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for a, cid in zip(shared, shared_ids):
        tc.checkpoint_realize(cid)
        a.check()
        tc.checkpoint_unregister(cid)


# ---- memory tiers --------------------------------------------------------------------

PATHS = [["l0", "l1", "l3", "l0"], ["l0", "l3", "l1", "l0"], [L0, L3, L0], ["device", "host", "device"],
         ["l0", "nvme", "host", "nvme", "device"]]


@pytest.mark.parametrize("use_stream", [False, True])
def test_bytes_survive_every_move_bit_for_bit(ctx, rng, spill, use_stream):
    ctx.set_spill_dir(spill)
    stream = ctx.stream() if use_stream else None
    for n in (1, 4097, 3 << 20):
        for path in PATHS:
            data = rng.integers(0, 256, size=n, dtype=np.uint8)
            buf = ctx.buffer_from_array(data)
            for prev, nxt in zip(path, path[1:]):
                p, q = tc.tier_code(prev), tc.tier_code(nxt)
                (buf.promote_async if q < p else buf.demote_async)(nxt, stream)
                buf.tier_sync()
                assert buf.get_tier() == q
                assert len(spill_files(spill)) == (1 if q == L3 else 0)
            np.testing.assert_array_equal(buf.to_numpy(n, np.uint8), data)
            buf.close()
    if stream is not None:
        stream.close()


def test_raw_tier_functions_and_aliases(ctx, spill):
    ctx.set_spill_dir(spill)
    buf = tc.buffer_from_array(ctx, np.arange(100, dtype=np.float32))
    assert tc.buffer_get_tier(buf) == L0
    tc.buffer_set_tier_hint(buf, "cold")
    tc.buffer_set_tier_hint(buf, tc.TC_TIER_HINT_HOT)
    tc.buffer_demote_async(buf, "TC_TIER_L3_LOCAL_NVME")
    assert tc.buffer_get_tier(buf) == L3
    tc.buffer_promote_async(buf, "L1")
    tc.buffer_promote_async(buf)  # default target: L0
    tc.buffer_tier_sync(buf)
    assert buf.get_tier() == L0
    tc.buffer_demote_async(buf)  # default target L0 on an L0 buffer: nothing to do
    np.testing.assert_array_equal(buf.to_numpy(100, np.float32), np.arange(100, dtype=np.float32))
    assert tc.memory_tier_usage(ctx)[0] == ctx.memory_tier_usage("device")[0] == 400


def test_usage_numbers(ctx, spill):
    ctx.set_spill_dir(spill)
    info = ctx.device_info()
    r0, cap0 = ctx.memory_tier_usage(L0)
    r1, cap1 = ctx.memory_tier_usage("host")
    r3, cap3 = ctx.memory_tier_usage("nvme")
    assert (r0, r1, r3) == (0, 0, 0)
    assert cap0 == info.memory_bytes
    assert cap1 == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    st = os.statvfs(os.path.dirname(spill))
    assert abs(cap3 - st.f_bavail * st.f_frsize) < (256 << 20)  # free space moves a little
    a, b = ctx.buffer(1000), ctx.buffer(5000)
    assert ctx.memory_tier_usage(L0)[0] == 6000
    a.demote_async("l1")
    b.demote_async("l3")
    assert [ctx.memory_tier_usage(t)[0] for t in (L0, L1, L3)] == [0, 1000, 5000]
    (name,) = spill_files(spill)
    assert os.path.getsize(os.path.join(spill, name)) == 5000
    b.close()
    assert spill_files(spill) == [] and ctx.memory_tier_usage(L3)[0] == 0
    ctx.set_memory_budget(12345, host_bytes=777)
    assert ctx.memory_tier_usage(L0)[1] == 12345 and ctx.memory_tier_usage(L1)[1] == 777
    ctx.set_memory_budget(None, host_bytes=0)
    assert ctx.memory_tier_usage(L0)[1] == info.memory_bytes


def test_tier_errors(ctx, spill, rng):
    ctx.set_spill_dir(spill)
    x = rand_f32(rng, (8, 8))
    A, B = f32_buffer(ctx, x), f32_buffer(ctx, x)
    C = ctx.buffer_from_array(poison(256))
    for remote in ("l2", "remote_nvme", tc.TC_TIER_L4_REMOTE_NVME):
        for call in (lambda t: B.demote_async(t), lambda t: B.promote_async(t), lambda t: ctx.memory_tier_usage(t)):
            with pytest.raises(tc.TensorcoreError) as e:
                call(remote)
            assert e.value.status == tc.TC_ERR_UNSUPPORTED and "remote" in e.value.detail
    for bad in (7, -1, 2**40):
        with pytest.raises(tc.TensorcoreError) as e:
            B.demote_async(bad)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(ValueError):
        B.demote_async("l9")
    with pytest.raises(ValueError):
        B.set_tier_hint("lukewarm")
    with pytest.raises(tc.TensorcoreError):
        B.set_tier_hint(4)
    with pytest.raises(tc.TensorcoreError) as e:
        B.promote_async("l1")  # slower than L0
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "demote" in e.value.detail
    B.demote_async("l1")
    with pytest.raises(tc.TensorcoreError) as e:
        ctx.gemm(A, B, C, 8, 8, 8, dtype="f32")
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "buffer B is in tier L1" in e.value.detail
    with pytest.raises(tc.TensorcoreError):
        B.to_numpy((8, 8), np.float32)
    np.testing.assert_array_equal(C.to_numpy(256, np.uint8), poison(256))  # untouched
    with pytest.raises(tc.TensorcoreError) as e:
        B.demote_async("l0")  # faster than L1
    assert "promote" in e.value.detail
    with tc.Context("cpu") as other:
        s = other.stream()
        with pytest.raises(tc.TensorcoreError) as e:
            B.promote_async("l0", s)
        assert "another context" in e.value.detail
        s.close()
    B.promote_async("l0")
    ctx.gemm(A, B, C, 8, 8, 8, dtype="f32")
    ref = x.astype(np.float64) @ x.astype(np.float64)
    assert_close(C.to_numpy((8, 8), np.float32), ref, np.abs(x) @ np.abs(x), 1e-5)


def test_wrapped_buffers_do_not_move(cpu_ctx):
    host = np.zeros(64, dtype=np.uint8)
    w = cpu_ctx.buffer_from_ptr(host, host.nbytes)
    with pytest.raises(tc.TensorcoreError) as e:
        w.demote_async("host")
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "caller memory" in e.value.detail
    assert w.get_tier() == L0


def test_moves_are_ordered_on_a_stream(ctx, rng, spill):
    ctx.set_spill_dir(spill)
    M = N = K = 96
    a, b = rand_f32(rng, (M, K)), rand_f32(rng, (K, N))
    A, B, C = f32_buffer(ctx, a), f32_buffer(ctx, b), ctx.buffer_from_array(poison(M * N * 4))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    with ctx.stream() as s:
        ctx.gemm_async(A, B, C, M, N, K, s, dtype="f32")
        C.demote_async("host", s)
        C.demote_async("nvme", s)
        A.demote_async("nvme", s)
        C.promote_async("device", s)
        A.promote_async("device", s)
        ctx.gemm_async(A, B, C, M, N, K, s, dtype="f32", beta=1.0)  # waits for both promotes
    C.tier_sync()
    assert_close(C.to_numpy((M, N), np.float32), 2 * ref, 2 * scale, 1e-5)


def test_budget_demotes_cold_and_ice_buffers(device, spill, rng):
    unit = 64 << 10
    with tc.Context(device, memory_budget=3 * unit, spill_dir=spill) as ctx:
        data = [rng.integers(0, 256, unit, dtype=np.uint8) for _ in range(5)]
        cold, ice, hot = (ctx.buffer_from_array(d) for d in data[:3])
        cold.set_tier_hint("cold")
        ice.set_tier_hint("ice")
        hot.set_tier_hint("hot")
        d = ctx.buffer_from_array(data[3])
        assert (cold.get_tier(), ice.get_tier()) == (L0, L1)  # ICE first
        e = ctx.buffer_from_array(data[4])
        assert cold.get_tier() == L1 and ctx.memory_tier_usage(L0)[0] == 3 * unit
        with pytest.raises(tc.TensorcoreError) as err:
            ctx.buffer(unit)
        assert err.value.status == tc.TC_ERR_ALLOC and "budget" in err.value.detail
        assert (hot.get_tier(), d.get_tier(), e.get_tier()) == (L0, L0, L0)
        ctx.set_memory_budget(0)
        for buf, want in zip((cold, ice, hot, d, e), data):
            buf.promote_async("l0")
            np.testing.assert_array_equal(buf.to_numpy(unit, np.uint8), want)


def test_host_budget_sends_demotions_to_disk(device, spill, rng):
    unit = 32 << 10
    with tc.init(device, memory_budget=2 * unit, host_memory_budget=unit, spill_dir=spill) as ctx:
        da, db = rng.integers(0, 256, unit, dtype=np.uint8), rng.integers(0, 256, unit, dtype=np.uint8)
        a, b = ctx.buffer_from_array(da), ctx.buffer_from_array(db)
        a.set_tier_hint("cold")
        b.set_tier_hint("cold")
        x = ctx.buffer(unit)
        assert a.get_tier() == L1
        y = ctx.buffer(unit)
        assert (a.get_tier(), b.get_tier()) == (L3, L1)
        assert len(spill_files(spill)) == 1
        ctx.set_memory_budget(0, host_bytes=0)
        x.close()
        y.close()
        a.promote_async("l0")
        b.promote_async("l0")
        np.testing.assert_array_equal(a.to_numpy(unit, np.uint8), da)
        np.testing.assert_array_equal(b.to_numpy(unit, np.uint8), db)


def test_context_options_are_checked(spill):
    with pytest.raises(tc.TensorcoreError):
        tc.Context("cpu", memory_budget=-1)
    with pytest.raises(TypeError):
        tc.Context("cpu", unknown_option=1)


def test_unwritable_spill_directory_is_an_io_error(ctx, tmp_path, rng):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad = [str(blocker), str(blocker / "sub")]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        bad.append(str(ro))
    data = rng.integers(0, 256, 10000, dtype=np.uint8)
    buf = ctx.buffer_from_array(data)
    s = ctx.stream()
    for d in bad:
        ctx.set_spill_dir(d)
        with pytest.raises(tc.TensorcoreError) as e:
            buf.demote_async("l3")
        assert e.value.status == tc.TC_ERR_IO and d in e.value.detail
        assert buf.get_tier() == L0
        with pytest.raises(tc.TensorcoreError) as e:
            buf.demote_async("l3", s)
            buf.tier_sync()
        assert e.value.status == tc.TC_ERR_IO
        buf.demote_async("l1")
        with pytest.raises(tc.TensorcoreError):
            buf.demote_async("l3")
        assert buf.get_tier() == L1
        buf.promote_async("l0")
        np.testing.assert_array_equal(buf.to_numpy(10000, np.uint8), data)
    s.close()


def _refused(ctx, buf, path, reason):
    with pytest.raises(tc.TensorcoreError) as e:
        buf.demote_async("l3")
    assert e.value.status == tc.TC_ERR_IO and path in e.value.detail and reason in e.value.detail, e.value.detail
    assert buf.get_tier() == L0 and ctx.memory_tier_usage(L3)[0] == 0


def _round_trip(buf, data):
    buf.demote_async("l3")
    assert buf.get_tier() == L3
    buf.promote_async("l0")
    np.testing.assert_array_equal(buf.to_numpy(data.size, np.uint8), data)


def test_spill_directory_is_created_private(cpu_ctx, tmp_path, rng):
    d = tmp_path / "made" / "spill"
    cpu_ctx.set_spill_dir(str(d))
    data = rng.integers(0, 256, 5000, dtype=np.uint8)
    buf = cpu_ctx.buffer_from_array(data)
    buf.demote_async("l3")
    assert os.stat(d).st_mode & 0o7777 == 0o700
    (name,) = spill_files(str(d))
    assert os.stat(d / name).st_mode & 0o777 == 0o600
    buf.promote_async("l0")
    np.testing.assert_array_equal(buf.to_numpy(5000, np.uint8), data)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o755, 0o770, 0o701])
def test_spill_directory_others_can_reach_is_refused(cpu_ctx, tmp_path, rng, mode):
    d = tmp_path / "spill"
    d.mkdir()
    d.chmod(mode)
    cpu_ctx.set_spill_dir(str(d))
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    buf = cpu_ctx.buffer_from_array(data)
    _refused(cpu_ctx, buf, str(d), "mode")
    assert os.listdir(d) == []
    d.chmod(0o700)
    _round_trip(buf, data)


def test_default_and_env_spill_directories_are_checked_too(device, tmp_path):
    """The default <tmp>/tensorcore-spill-<uid>, squatted world-writable in
    advance, and $TC_TIER_DIR, in a child whose TMPDIR is ours."""
    squat = tmp_path / f"tensorcore-spill-{os.geteuid()}"
    squat.mkdir()
    squat.chmod(0o777)
    env_dir = tmp_path / "from-env"
    env_dir.mkdir()
    env_dir.chmod(0o777)
    code = textwrap.dedent("""
        import os, sys, numpy as np, tensorcore as tc
        with tc.Context(sys.argv[1]) as ctx:
            buf = ctx.buffer_from_array(np.arange(100, dtype=np.uint8))
            try:
                buf.demote_async("l3")
                sys.exit("a world-writable default spill directory was used")
            except tc.TensorcoreError as e:
                assert e.status == tc.TC_ERR_IO and sys.argv[2] in e.detail and "mode" in e.detail, e
            os.chmod(sys.argv[2], 0o700)
            buf.demote_async("l3")
            buf.promote_async("l0")
            os.environ["TC_TIER_DIR"] = sys.argv[3]
            try:
                buf.demote_async("l3")
                sys.exit("a world-writable $TC_TIER_DIR was used")
            except tc.TensorcoreError as e:
                assert e.status == tc.TC_ERR_IO and sys.argv[3] in e.detail, e
        print("ok")
    """)
    env = _child_env()
    env["TMPDIR"] = str(tmp_path)
    env.pop("TC_TIER_DIR", None)
    r = subprocess.run([sys.executable, "-c", code, device, str(squat), str(env_dir)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_spill_directory_of_another_user_is_refused(cpu_ctx, tmp_path, rng):
    d = tmp_path / "spill"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    cpu_ctx.set_spill_dir(str(d))
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    buf = cpu_ctx.buffer_from_array(data)
    _refused(cpu_ctx, buf, str(d), "owned by uid 65534")
    os.chown(d, 0, 0)
    _round_trip(buf, data)


def test_symlink_in_place_of_the_spill_directory_is_refused(cpu_ctx, tmp_path, rng):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "spill"
    link.symlink_to(real)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    buf = cpu_ctx.buffer_from_array(data)
    for path in (str(link), str(link) + "/"):
        cpu_ctx.set_spill_dir(path)
        _refused(cpu_ctx, buf, str(link), "symbolic link")
    assert os.listdir(real) == []


def test_planted_links_and_files_cannot_redirect_a_spill(cpu_ctx, tmp_path, rng):
    d = tmp_path / "spill"
    cpu_ctx.set_spill_dir(str(d))
    first = rng.integers(0, 256, 3000, dtype=np.uint8)
    a = cpu_ctx.buffer_from_array(first)
    a.demote_async("l3")
    (name,) = spill_files(str(d))
    prefix = f"tc-{os.getpid()}-"
    assert name.startswith(prefix)
    n = int(name[len(prefix):].split(".")[0])
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim")
    planted = []
    for k in range(1, 9):
        p = d / f"{prefix}{n + k}.spill"
        if k == 2:
            p.write_bytes(b"planted")
        else:
            p.symlink_to(victim)
        planted.append(p)
    data = rng.integers(0, 256, 20000, dtype=np.uint8)
    b = cpu_ctx.buffer_from_array(data)
    _round_trip(b, data)
    a.promote_async("l0")
    np.testing.assert_array_equal(a.to_numpy(3000, np.uint8), first)
    assert victim.read_bytes() == b"victim"
    assert planted[1].read_bytes() == b"planted"
    assert all(p.is_symlink() for i, p in enumerate(planted) if i != 1)
    assert sorted(spill_files(str(d))) == sorted(p.name for p in planted)


FULL_DISK_CHILD = textwrap.dedent("""
    import os, resource, signal, sys
    import numpy as np
    import tensorcore as tc
    device, spill, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if limit:  # a file-size limit stands in for a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    data = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    with tc.Context(device, spill_dir=spill) as ctx:
        buf = ctx.buffer_from_array(data)
        try:
            buf.demote_async("l3")
            sys.exit("demote to a full disk succeeded")
        except tc.TensorcoreError as e:
            assert e.status == tc.TC_ERR_IO, e
            print("sync:", e.detail)
        assert buf.get_tier() == tc.TC_TIER_L0_DEVICE
        s = ctx.stream()
        buf.demote_async("l1", s)
        buf.demote_async("l3", s)
        try:
            buf.tier_sync()
            sys.exit("queued demote to a full disk succeeded")
        except tc.TensorcoreError as e:
            assert e.status == tc.TC_ERR_IO, e
            print("async:", e.detail)
        assert buf.get_tier() == tc.TC_TIER_L1_HOST_RAM
        try:
            s.sync()
        except tc.TensorcoreError:
            pass  # the CPU stream reports the failed step too
        s.close()
        buf.promote_async("l0")
        assert (buf.to_numpy(data.size, np.uint8) == data).all()
        assert ctx.memory_tier_usage("l3")[0] == 0
        assert os.listdir(spill) == [], os.listdir(spill)
    print("ok")
""")


def test_full_disk_is_an_io_error_and_keeps_the_bytes(device, spill):
    os.makedirs(spill, mode=0o700)
    r = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, device, spill, str(64 << 10)], env=_child_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert "File too large" in r.stdout


def _child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(tc.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TENSORCORE_LIB", tc.library_path)
    return env


def _can_mount_tmpfs():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        return False
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                       capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and mount namespaces for a tiny tmpfs")
def test_tiny_tmpfs_is_a_full_disk(device, tmp_path):
    """A 256 KiB tmpfs, mounted in a private mount namespace of a child process."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    script = 'mount -t tmpfs -o size=256k,mode=0700 tmpfs "$1" && exec "$2" -c "$3" "$4" "$1" 0'
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(mnt), sys.executable, FULL_DISK_CHILD,
                        device], env=_child_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert "No space left on device" in r.stdout


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and mount namespaces for a read-only tmpfs")
def test_read_only_file_system_is_an_io_error(device, tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    code = textwrap.dedent("""
        import sys, numpy as np, tensorcore as tc
        with tc.Context(sys.argv[1], spill_dir=sys.argv[2]) as ctx:
            buf = ctx.buffer_from_array(np.arange(1000, dtype=np.uint8))
            try:
                buf.demote_async("l3")
                sys.exit("demote to a read-only file system succeeded")
            except tc.TensorcoreError as e:
                assert e.status == tc.TC_ERR_IO and "Read-only" in e.detail, e
            assert buf.get_tier() == tc.TC_TIER_L0_DEVICE
            assert (buf.to_numpy(1000, np.uint8) == np.arange(1000, dtype=np.uint8)).all()
        print("ok")
    """)
    script = 'mount -t tmpfs -o ro,size=64k,mode=0700 tmpfs "$1" && exec "$2" -c "$3" "$4" "$1"'
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(mnt), sys.executable, code, device],
                       env=_child_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_checkpointing_example_runs(device):
    """examples/checkpointing at a small size: its own checks (identical
    gradients, float64 agreement) pass and checkpointing lowers the peak."""
    script = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "checkpointing",
                          "mlp_checkpointing.py")
    r = subprocess.run([sys.executable, script, "--device", device, "--batch", "256", "--width", "32",
                        "--layers", "9", "--outputs", "8"], env=_child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.startswith(("all", "checkp"))}
    assert float(rows["checkpointed"][1]) < float(rows["all"][2])
    assert int(rows["checkpointed"][2]) == 6  # 9 layers, k = 3: 3 kept, 6 recomputed


def test_capabilities(ctx):
    caps = ctx.runtime_capabilities()
    assert tc.capability_available(caps, tc.TC_CAPABILITY_CHECKPOINT)
    assert tc.capability_available(caps, "memory_tiers")


# ---- backends this build does not have ----------------------------------------------

def test_hip_diagnostics(cpu_ctx):
    assert tc.hip_device_count() == 0
    assert tc.hip_last_kernel_name() == ""
    for call in (lambda: cpu_ctx.hip_init(), lambda: tc.hip_init(cpu_ctx), lambda: cpu_ctx.hip_device_info(),
                 lambda: tc.hip_device_info_get(cpu_ctx), lambda: tc.hip_device_at(0),
                 lambda: cpu_ctx.hip_select_device(0), lambda: tc.hip_select_device(cpu_ctx, 0)):
        with pytest.raises(tc.TensorcoreError) as e:
            call()
        assert e.value.status == tc.TC_ERR_UNSUPPORTED and "built without HIP" in e.value.detail
    for call in (lambda: tc.hip_device_at(-1), lambda: cpu_ctx.hip_select_device(-1), lambda: tc.hip_init(None)):
        with pytest.raises(tc.TensorcoreError) as e:
            call()
        assert e.value.status == tc.TC_ERR_INVALID_ARG
    assert tc.TCHipDeviceInfo().as_dict()["device_name"] == ""


def test_tensorops_selector_answers_none():
    assert tc.tensorops_gemm_kernel_name() is None
    assert tc.tensorops_gemm_kernel_name("bf16", "f32") is None
    with pytest.raises(tc.TensorcoreError):
        tc.tensorops_gemm_kernel_name("f99")
