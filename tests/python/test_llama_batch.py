"""Several sequences in one model (continuous batching; include/tensorcore/llama.h,
tc_llama_decode_batch): a batch step's logits for every sequence against
the float64 reference and against that sequence run alone, for sequences
of different lengths, f16 and f32 caches, every architecture; sequences
leaving and joining between steps; greedy steps (the ids found where the
step ran) against the argmax of the logits; every refusal with the model
unchanged.
On every device present, and on the CPU also the way a GPU runs
(TC_LLAMA_DEVICE_PATH: the queue, GEMM products from 32 rows, the decode
attention on an f32 cache); on a GPU the steps after the first of a row
count replay a recorded graph."""

import ctypes
import os

import numpy as np
import pytest

import tensorcore as tc
import test_llama as base
import test_llama_archs as archs
from conftest import HAVE_CUDA, expect_status
from tensorcore.llama import Llama

V = base.V
WHERE = ["cpu", "cpu-device-path",
         pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device"))]


@pytest.fixture(params=WHERE)
def where(request, monkeypatch):
    """A context on the device (closed after the test); cpu-device-path loads
    models the way a GPU does."""
    if request.param == "cpu-device-path":
        monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    ctx = tc.Context("cuda" if request.param == "cuda" else "cpu")
    yield ctx
    ctx.close()


def f16_tolerance(w, histories, reference):
    """A fraction of the f16 rounding's own effect on the logits (see
    test_llama_archs.kv_tolerance): large enough for rounding that lands on
    the other side of an f16 step, small enough to catch a cache that did not
    round."""
    effect = max(np.abs(reference(w, h, "f16") - reference(w, h, "f32")).max() / np.abs(reference(w, h, "f32")).max()
                 for h in histories)
    return max(5e-5, 0.4 * effect)


class Runner:
    """Sequences driven through a model, each with the ids it holds, checked
    against the reference of its whole history after every call."""

    def __init__(self, m, w, reference, tol):
        self.m, self.w, self.reference, self.tol = m, w, reference, tol
        self.hist = {}
        self.alone = {}  # seq -> logits of each position when run alone

    def prompt(self, seq, ids):
        self.m.reset(seq=seq)
        out = self.m.eval(ids, seq=seq)
        self.hist[seq] = list(ids)
        self.check(out, self.reference(self.w, self.hist[seq]), "seq %d prompt" % seq)

    def step(self, seqs, ids):
        out = self.m.decode_batch(seqs, ids)
        assert out.shape == (len(seqs), V)
        for row, (s, t) in enumerate(zip(seqs, ids)):
            self.hist[s].append(int(t))
            ref = self.reference(self.w, self.hist[s])[-1:]
            self.check(out[row:row + 1], ref, "seq %d at %d (row %d)" % (s, len(self.hist[s]) - 1, row))
        for s in seqs:
            assert self.m.seq_n_past(s) == len(self.hist[s])
        return out

    def check(self, out, ref, what):
        assert out.shape == ref.shape and np.isfinite(out).all(), what
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert err < self.tol, "%s: relative error %.3g" % (what, err)


def llama_ref(kv_type):
    return lambda w, ids, kv=kv_type: base.reference(w, np.asarray(ids), kv_type=kv)


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_batch_steps_match_reference_and_each_sequence_alone(tmp_path, where, kv_type):
    rng = np.random.default_rng(71 + len(kv_type))
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    lengths = [5, 1, 12, 3]
    prompts = [[int(t) for t in rng.integers(0, V, n)] for n in lengths]
    steps = [[int(t) for t in rng.integers(0, V, len(lengths))] for _ in range(5)]
    tol = 5e-5
    if kv_type == "f16":
        tol = f16_tolerance(w, [p + [s[i] for s in steps] for i, p in enumerate(prompts)],
                            lambda w, h, kv: base.reference(w, np.asarray(h), kv_type=kv))
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type=kv_type, max_sequences=4) as m:
        assert m.max_sequences == 4
        r = Runner(m, w, llama_ref(kv_type), tol)
        for s in (2, 0, 3, 1):
            r.prompt(s, prompts[s])
        order = [2, 0, 3, 1]
        batch = [r.step(order, [steps[k][s] for s in order]) for k in range(3)]
        r.step([3, 1], [steps[3][3], steps[3][1]])  # a subset; the others wait
        r.step([1], [steps[4][1]])                   # a batch of one
        assert [m.seq_n_past(s) for s in range(4)] == [5 + 3, 1 + 5, 12 + 3, 3 + 4]
        assert m.n_past == m.seq_n_past(0)
    # Each sequence alone in a model of one sequence: the same logits as its
    # batch rows, up to f32 rounding (the products of 4 rows and of 1 may sum
    # in another order) and, in an f16 cache, a key or value that rounding
    # then moves to the neighbouring f16 value.
    alone_tol = 1e-5 if kv_type == "f32" else 1e-4
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type=kv_type) as one:
        for s in range(4):
            one.reset()
            one.eval(prompts[s])
            alone = np.stack([one.eval([steps[k][s]])[0] for k in range(3)])
            rows = np.stack([batch[k][order.index(s)] for k in range(3)])
            err = np.abs(rows - alone).max() / np.abs(alone).max()
            assert err < alone_tol, "seq %d: batch rows vs alone %.3g" % (s, err)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_f16_batch_steps_take_the_8bit_products(tmp_path, where, fmt):
    """f16 activations: a batch step of fewer than 32 rows runs the one-token
    step's 8-bit products on all its rows (on a device; on the host the
    products quantise per row as they always do). Each row's arithmetic is
    that row's alone: the logits match each sequence's own one-token steps
    up to f32 rounding (on the host, whose products round their outputs to
    f16, the tile products of 8 rows and more sum in another order, which
    can move an output to the neighbouring f16 value), and the reference
    within the 8-bit contract. 11
    sequences make two passes of 8 rows over each matrix."""
    rng = np.random.default_rng(91)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), fmt)
    S = 11
    prompts = [[int(t) for t in rng.integers(0, V, 2 + s % 5)] for s in range(S)]
    steps = [[int(t) for t in rng.integers(0, V, S)] for _ in range(3)]
    order = list(range(S))[::-1]
    host = where.device == "cpu" and not os.environ.get("TC_LLAMA_DEVICE_PATH")
    alone_tol = 2e-3 if host else 1e-5
    with Llama(path, ctx=where, n_ctx=32, activations="f16", kv_type="f32", max_sequences=S) as m:
        for s in range(S):
            m.eval(prompts[s], seq=s)
        batch = [m.decode_batch(order, [steps[k][s] for s in order]) for k in range(3)]
        four = m.decode_batch(order[:4], [1, 2, 3, 4])  # one pass of 4 rows
    with Llama(path, ctx=where, n_ctx=32, activations="f16", kv_type="f32") as one:
        for s in range(S):
            one.reset()
            one.eval(prompts[s])
            alone = np.stack([one.eval([steps[k][s]])[0] for k in range(3)])
            if s in order[:4]:
                alone = np.concatenate([alone, one.eval([1 + order.index(s)])])
            rows = np.stack([batch[k][order.index(s)] for k in range(3)])
            if s in order[:4]:
                rows = np.concatenate([rows, four[order.index(s)][None]])
            err = np.abs(rows - alone).max() / np.abs(alone).max()
            assert err < alone_tol, "seq %d: batch rows vs alone %.3g" % (s, err)
            ref = base.reference(w, np.asarray(prompts[s] + [steps[k][s] for k in range(3)]))[-3:]
            err = np.abs(rows[:3] - ref).max() / np.abs(ref).max()
            assert err < 5e-2, "seq %d against the reference: %.3g" % (s, err)


def test_many_sequences_take_the_gemm_products(tmp_path, where):
    """40 sequences: a batch step's products have 40 rows (dequantise + GEMM
    on a device); every row is its sequence's logits."""
    rng = np.random.default_rng(73)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q4_0")
    S = 40
    with Llama(path, ctx=where, n_ctx=48, activations="f32", kv_type="f32", max_sequences=S) as m:
        r = Runner(m, w, llama_ref("f32"), 5e-5)
        for s in range(S):
            r.prompt(s, [int(t) for t in rng.integers(0, V, 1 + s % 7)])
        for _ in range(2):
            seqs = [int(s) for s in rng.permutation(S)]
            r.step(seqs, [int(t) for t in rng.integers(0, V, S)])


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_sequences_leave_and_join_between_steps(tmp_path, where, kv_type):
    """A sequence reset and prompted anew between batch steps (slot reuse)
    while the others go on: every row keeps matching the reference of its own
    history, and a finished sequence leaves the batch."""
    rng = np.random.default_rng(75)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "f16")
    ids = lambda n: [int(t) for t in rng.integers(0, V, n)]
    with Llama(path, ctx=where, n_ctx=40, activations="f32", kv_type=kv_type, max_sequences=3) as m:
        r = Runner(m, w, llama_ref(kv_type), 5e-5 if kv_type == "f32" else 2e-3)
        for s, n in ((0, 6), (1, 9), (2, 2)):
            r.prompt(s, ids(n))
        r.step([0, 1, 2], ids(3))
        r.step([0, 1, 2], ids(3))
        r.prompt(1, ids(4))            # sequence 1 leaves, a new one joins in its slot
        r.step([2, 1, 0], ids(3))
        r.step([0, 2], ids(2))         # sequence 1 finished: it leaves the batch
        r.prompt(1, ids(7))
        r.step([1, 0, 2], ids(3))
        r.step([1, 0, 2], ids(3))
        # The sequence now in slot 1, run alone (a prompt and one step), gives
        # the logits of its next batch step.
        ids1 = r.hist[1] + [5]
        with Llama(path, ctx=where, n_ctx=40, activations="f32", kv_type=kv_type) as one:
            one.eval(ids1[:-1])
            alone = one.eval(ids1[-1:])[0]
        row = m.decode_batch([0, 1], [9, 5])[1]
        assert np.abs(row - alone).max() <= (1e-5 if kv_type == "f32" else 1e-4) * np.abs(alone).max()


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("arch", list(archs.ARCHS))
def test_every_architecture_in_batch_steps(tmp_path, where, arch, kv_type):
    """Biases, per-head Q/K norms, post-branch norms, GEGLU, soft-capped
    scores and logits and the sliding-window layers (window 5: the longer
    sequences see only its last positions) in batch steps."""
    rng = np.random.default_rng(77 + len(arch))
    path = tmp_path / "m.gguf"
    w = archs.write_model(path, arch, archs.make_weights(rng, arch))
    prompts = [[int(t) for t in rng.integers(0, V, n)] for n in (9, 2, 5)]
    steps = [[int(t) for t in rng.integers(0, V, 3)] for _ in range(3)]
    reference = lambda w, h, kv=kv_type: archs.reference(arch, w, np.asarray(h), kv)
    tol = max(archs.kv_tolerance(arch, w, np.asarray(p + [s[i] for s in steps]), kv_type)
              for i, p in enumerate(prompts))
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type=kv_type, max_sequences=3) as m:
        r = Runner(m, w, reference, tol)
        for s in range(3):
            r.prompt(s, prompts[s])
        for k in range(3):
            r.step([1, 2, 0], [steps[k][1], steps[k][2], steps[k][0]])



@pytest.mark.parametrize("activations,fmt", [("f32", "q8_0"), ("f16", "q4_0")])
def test_greedy_steps_are_the_argmax_of_each_row(tmp_path, where, activations, fmt):
    """decode_batch_greedy's ids are np.argmax of decode_batch's rows for the
    same step (a twin model fed the same tokens): 1, 3 and 40 rows (the
    8-bit products, and on a device the GEMM ones from 32 rows), each row
    count's later steps replayed from its recorded graph on a GPU; the
    greedy model's sequences advance as the other's."""
    rng = np.random.default_rng(83)
    path = tmp_path / "m.gguf"
    base.write_model(path, base.make_weights(rng), fmt)
    S = 40
    kw = dict(ctx=where, n_ctx=24, activations=activations, kv_type="f16", max_sequences=S)
    with Llama(path, **kw) as a, Llama(path, **kw) as b:
        for s in range(S):
            p = rng.integers(0, V, 1 + s % 5)
            a.eval(p, seq=s)
            b.eval(p, seq=s)
        for seqs in ([3], [0, 7, 2], [int(s) for s in rng.permutation(S)], [5], [1, 4, 9]):
            toks = rng.integers(0, V, len(seqs))
            for _ in range(3):
                want = np.argmax(a.decode_batch(seqs, toks), axis=1)
                got = b.decode_batch_greedy(seqs, toks)
                assert got.dtype == np.int32 and got.tolist() == want.tolist()
                toks = got
        assert [b.seq_n_past(s) for s in range(S)] == [a.seq_n_past(s) for s in range(S)]


def test_refusals_leave_the_model_unchanged(tmp_path, where):
    """Every refused batch step (and sequence call) returns its status with a
    detail, writes nothing to the caller's logits, moves no sequence and
    leaves the cache as it was: the next steps still match the reference."""
    rng = np.random.default_rng(79)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    n_ctx = 12
    with Llama(path, ctx=where, n_ctx=n_ctx, activations="f32", kv_type="f16", max_sequences=3) as m:
        h = m.handle
        r = Runner(m, w, llama_ref("f16"), 2e-3)
        r.prompt(0, [int(t) for t in rng.integers(0, V, 4)])
        r.prompt(1, [int(t) for t in rng.integers(0, V, n_ctx)])  # full
        r.prompt(2, [int(t) for t in rng.integers(0, V, 2)])
        before = [m.seq_n_past(s) for s in range(3)]
        poison = np.full(3 * V, 7.0, np.float32)
        bad = [
            (tc.TC_ERR_INVALID_ARG, [0, 3], [1, 1], "outside [0, 3)"),
            (tc.TC_ERR_INVALID_ARG, [-1], [1], "seqs[0] is -1"),
            (tc.TC_ERR_INVALID_ARG, [0, 2, 0], [1, 1, 1], "twice"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [1, V], "tokens[1]"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [-1, 1], "tokens[0]"),
            (tc.TC_ERR_INVALID_SHAPE, [0, 1], [1, 1], "sequence 1 is full"),
            (tc.TC_ERR_INVALID_SHAPE, [], [], "n = 0"),
            (tc.TC_ERR_INVALID_SHAPE, [0, 2, 0, 2], [1, 1, 1, 1], "max_sequences 3"),
        ]
        for status, seqs, toks, text in bad:
            out = poison.copy()
            expect_status(status, tc.llama_decode_batch, h, seqs, toks, out, text=text)
            assert (out == 7.0).all(), "logits written by a refused step %r" % (seqs,)
            assert [m.seq_n_past(s) for s in range(3)] == before
        small = poison[:2 * V - 1].copy()
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_decode_batch, h, [0, 2], [1, 1], small, text="capacity")
        assert (small == 7.0).all()
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_decode_batch, h, [0, 2], [1], None, text="2 sequences and 1 tokens")
        for status, seqs, toks, text in bad:  # the greedy step refuses the same batches
            expect_status(status, tc.llama_decode_batch_greedy, h, seqs, toks, text=text)
            assert [m.seq_n_past(s) for s in range(3)] == before
        greedy = tc._api.llama._tc_llama_decode_batch_greedy
        two = (ctypes.c_int32 * 2)(0, 2)
        assert greedy(h, two, two, 2, None) == tc.TC_ERR_INVALID_ARG
        assert "next is null" in tc.last_error_detail()
        assert [m.seq_n_past(s) for s in range(3)] == before
        raw = tc._api.llama._tc_llama_decode_batch
        assert raw(h, None, None, 1, None, 0) == tc.TC_ERR_INVALID_ARG
        assert "seqs is null" in tc.last_error_detail()
        seq_ok = (ctypes.c_int32 * 1)(0)
        assert raw(h, seq_ok, None, 1, None, 0) == tc.TC_ERR_INVALID_ARG
        assert "tokens is null" in tc.last_error_detail()
        assert raw(h, seq_ok, seq_ok, 1, None, 5) == tc.TC_ERR_INVALID_ARG  # a capacity without an array
        for fn, args in ((tc.llama_seq_eval, (3, [1])), (tc.llama_seq_reset, (-1,)), (tc.llama_seq_n_past, (3,))):
            expect_status(tc.TC_ERR_INVALID_ARG, fn, h, *args, text="outside [0, 3)")
        expect_status(tc.TC_ERR_INVALID_SHAPE, tc.llama_seq_eval, h, 1, [1], text="overflow")
        # The model holds positions: neither the slots nor the cache type may change.
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_max_sequences, h, 4, text="reset every sequence")
        m.reset(seq=0)
        m.reset(seq=1)
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_max_sequences, h, 4, text="sequence 2 holds 2")
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_kv_cache_type, h, "f32", text="sequence 2")
        for n in (0, 513):  # 512: a forward's rows, whatever n_ctx
            expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_max_sequences, h, n, text="sequences (1 to 512)")
        assert m.max_sequences == 3 and tc.llama_get_kv_cache_type(h) == "f16"
        assert [m.seq_n_past(s) for s in range(3)] == [0, 0, 2]
        # Sequence 2 is as it was: steps continue on its cache.
        r.prompt(0, [int(t) for t in rng.integers(0, V, 3)])
        r.step([2, 0], [5, 6])
        r.step([0, 2], [7, 8])


def test_max_sequences_changes_only_when_empty_and_keeps_the_old_cache_on_failure(tmp_path, monkeypatch):
    """set_max_sequences reallocates the cache (the model empty), and a
    refused allocation keeps the old one, still working."""
    monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    rng = np.random.default_rng(81)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    with tc.Context("cpu") as ctx, Llama(path, ctx=ctx, n_ctx=64, activations="f32", kv_type="f32") as m:
        assert m.max_sequences == 1
        m.set_max_sequences(2)
        r = Runner(m, w, llama_ref("f32"), 5e-5)
        r.prompt(1, [1, 2, 3])
        m.reset(seq=1)
        ctx.set_memory_budget(ctx.memory_tier_usage("device")[0] + 1024)
        expect_status(tc.TC_ERR_ALLOC, tc.llama_set_max_sequences, m.handle, 64)
        assert m.max_sequences == 2
        r.prompt(0, [4, 5])
        r.prompt(1, [6])
        r.step([1, 0], [7, 8])
