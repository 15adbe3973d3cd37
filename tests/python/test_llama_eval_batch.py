"""Rows of any sequences as one batch (include/tensorcore/llama.h,
tc_llama_eval_batch): several prompts as one prefill, prompts beside decode
rows, a sequence's rows interleaved with others', a batch longer than one
forward (512 rows whatever n_ctx: 40 sequences of n_ctx 16, one cut between
two forwards); every
wanted row against the float64 reference of its sequence's history, every
architecture, f16 and f32 caches, f16 activations within the 8-bit
contract, the want flags, and every refusal with the model unchanged. On
every device present, and on the CPU also the way a GPU runs
(TC_LLAMA_DEVICE_PATH)."""

import ctypes

import numpy as np
import pytest

import tensorcore as tc
import test_llama as base
import test_llama_archs as archs
from conftest import expect_status
from tensorcore.llama import Llama
from test_llama_batch import f16_tolerance, llama_ref, where  # noqa: F401 (where: the device fixture)
from tokenizer_files import gemma3_path, smollm2_path

V = base.V


class Histories:
    """Each sequence's ids so far; checks a batch's rows against the
    reference of each row's history up to that row."""

    def __init__(self, m, w, reference, tol):
        self.m, self.w, self.reference, self.tol = m, w, reference, tol
        self.hist = {}

    def run(self, seqs, toks, want="all"):
        out = self.m.eval_batch(seqs, toks, want=want)
        rows = []  # (sequence, its history length after the row) per row
        for s, t in zip(seqs, toks):
            self.hist.setdefault(s, []).append(int(t))
            rows.append((s, len(self.hist[s])))
        if isinstance(want, str):
            last = {s: i for i, s in enumerate(seqs)}
            flags = [want == "all" or last[s] == i for i, s in enumerate(seqs)]
        else:
            flags = list(want)
        picked = [r for r, f in zip(rows, flags) if f]
        assert out.shape == (len(picked), V)
        for k, (s, n) in enumerate(picked):
            ref = self.reference(self.w, self.hist[s][:n])[n - 1]
            err = np.abs(out[k] - ref).max() / np.abs(ref).max()
            assert np.isfinite(out[k]).all() and err < self.tol, "seq %d at %d: %.3g" % (s, n - 1, err)
        for s in set(seqs):
            assert self.m.seq_n_past(s) == len(self.hist[s])
        return out


def ids(rng, n):
    return [int(t) for t in rng.integers(0, V, n)]


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_prompts_and_steps_of_several_sequences_as_batches(tmp_path, where, kv_type):
    rng = np.random.default_rng(171 + len(kv_type))
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    prompts = [ids(rng, n) for n in (5, 1, 12, 3)]
    more = {s: ids(rng, 3) for s in range(4)}
    hist = [p + more[s] for s, p in enumerate(prompts)]
    tol = 5e-5 if kv_type == "f32" else f16_tolerance(w, hist, lambda w, h, kv: base.reference(w, np.asarray(h),
                                                                                                 kv_type=kv))
    with Llama(path, ctx=where, n_ctx=16, activations="f32", kv_type=kv_type, max_sequences=4) as m:
        r = Histories(m, w, llama_ref(kv_type), tol)
        r.run([s for s, p in enumerate(prompts) for _ in p], [t for p in prompts for t in p])
        # Interleaved: each sequence's rows between the others'.
        r.run([2, 0, 2, 3, 0, 1, 3, 2, 1, 0, 1, 3], [more[s].pop() for s in (2, 0, 2, 3, 0, 1, 3, 2, 1, 0, 1, 3)])
        # One decode row of two sequences beside a new prompt in a reset slot (continuous batching).
        m.reset(seq=1)
        r.hist[1] = []
        r.run([0, 1, 1, 1, 1, 2], [7] + ids(rng, 4) + [9], want="last")
        # Then decode_batch on the caches eval_batch wrote.
        step = m.decode_batch([3, 1], [4, 5])
        for row, s in enumerate((3, 1)):
            r.hist[s].append((4, 5)[row])
            ref = base.reference(w, np.asarray(r.hist[s]), kv_type=kv_type)[-1]
            assert np.abs(step[row] - ref).max() / np.abs(ref).max() < tol


def test_a_batch_longer_than_one_forward(tmp_path, where):
    """A forward takes 512 rows whatever n_ctx: 40 sequences of n_ctx 16
    (more sequences than positions, once refused) with 14 prompt rows each,
    560 rows, so the forwards are 512 and 48 rows and sequence 36's rows are
    cut between them. Its every row and each sequence's last row against
    the reference; then one decode step of all 40 (a batch step of more rows
    than n_ctx)."""
    rng = np.random.default_rng(191)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    S, n = 40, 14
    prompts = [ids(rng, n) for _ in range(S)]
    cut = 512 // n  # the sequence whose rows straddle row 512
    with Llama(path, ctx=where, n_ctx=16, activations="f32", kv_type="f32", max_sequences=S) as m:
        r = Histories(m, w, llama_ref("f32"), 5e-5)
        seqs = [s for s in range(S) for _ in range(n)]
        want = [s == cut or i == n - 1 for s in range(S) for i in range(n)]
        r.run(seqs, [t for p in prompts for t in p], want=want)
        step = m.decode_batch(list(range(S)), [3] * S)
        for s in (0, cut, S - 1):
            r.hist[s].append(3)
            ref = base.reference(w, np.asarray(r.hist[s]))[-1]
            assert np.abs(step[s] - ref).max() / np.abs(ref).max() < 5e-5, "step of sequence %d" % s


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_prompts_of_one_length_in_consecutive_slots(tmp_path, where, kv_type):
    """Prompts of one length from position 0 in consecutive slots (the
    usual batched prefill): a device attends a run of them as one call,
    their packed keys side by side (as many as n_ctx positions hold: here
    two of 7 in 16 with f32 activations). Slots 2, 3, 0, 1, then 4 with
    another length; then continuations of one length again (P > 0)."""
    rng = np.random.default_rng(181 + len(kv_type))
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    order = [2, 3, 0, 1, 4]
    prompts = {s: ids(rng, 7 if s < 4 else 5) for s in order}
    tol = 2e-3 if kv_type == "f16" else 5e-5
    with Llama(path, ctx=where, n_ctx=16, activations="f32", kv_type=kv_type, max_sequences=5) as m:
        r = Histories(m, w, llama_ref(kv_type), tol)
        r.run([s for s in order for _ in prompts[s]], [t for s in order for t in prompts[s]])
        r.run([0, 1, 2, 3], ids(rng, 4))              # one row each at P = 7: pairs of single rows
        r.run([0, 0, 1, 1, 2, 2, 3, 3], ids(rng, 8))  # two each at P = 8: one at a time (16 positions hold one)


def test_want_flags_pick_the_rows(tmp_path, where):
    """want="last", explicit flags and no wanted row at all: the same rows as
    want="all" gives (the logits product runs on the wanted rows only)."""
    rng = np.random.default_rng(173)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q4_0")
    seqs = [0, 0, 1, 0, 2, 2, 1]
    toks = ids(rng, len(seqs))
    outs = {}
    for want in ("all", "last", [True, False, False, True, True, False, True], [False] * 7):
        with Llama(path, ctx=where, n_ctx=16, activations="f32", kv_type="f32", max_sequences=3) as m:
            outs[str(want)] = m.eval_batch(seqs, toks, want=want)
            assert [m.seq_n_past(s) for s in range(3)] == [3, 2, 2]
    full = outs["all"]
    assert outs["last"].shape == (3, V) and outs[str([False] * 7)].shape == (0, V)
    for key, rows in (("last", [3, 5, 6]), (str([True, False, False, True, True, False, True]), [0, 3, 4, 6])):
        assert np.abs(outs[key] - full[rows]).max() <= 1e-5 * np.abs(full).max(), key


def test_f16_activations_within_the_8bit_contract(tmp_path, where):
    """f16 activations (on a GPU the products of this many rows on 8-bit or
    f16 operands, the attention on f16 operands): every row within the
    8-bit contract's error of the reference. The same prompts each alone
    take other products on a GPU (fewer rows), so they agree only within
    that contract too."""
    rng = np.random.default_rng(175)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q4_0")
    prompts = [ids(rng, n) for n in (9, 4, 13)]
    seqs = [s for s, p in enumerate(prompts) for _ in p]
    with Llama(path, ctx=where, n_ctx=32, activations="f16", kv_type="f16", max_sequences=3) as m:
        batch = Histories(m, w, llama_ref("f16"), 5e-2).run(seqs, [t for p in prompts for t in p])
    with Llama(path, ctx=where, n_ctx=32, activations="f16", kv_type="f16") as one:
        for s, p in enumerate(prompts):
            one.reset()
            alone = one.eval(p)
            rows = batch[[i for i, q in enumerate(seqs) if q == s]]
            assert np.abs(rows - alone).max() <= 5e-2 * np.abs(alone).max(), s


@pytest.mark.parametrize("arch", list(archs.ARCHS))
def test_every_architecture_in_batches(tmp_path, where, arch):
    """Biases, Q/K norms, post-branch norms, GEGLU, soft-capping and the
    sliding-window layers (window 5: the longer prompts' later rows see only
    its last positions) with rows of three sequences interleaved."""
    rng = np.random.default_rng(177 + len(arch))
    path = tmp_path / "m.gguf"
    w = archs.write_model(path, arch, archs.make_weights(rng, arch))
    prompts = [ids(rng, n) for n in (9, 2, 6)]
    tol = max(archs.kv_tolerance(arch, w, np.asarray(p), "f16") for p in prompts)
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type="f16", max_sequences=3) as m:
        r = Histories(m, w, lambda w, h: archs.reference(arch, w, np.asarray(h), "f16"), tol)
        r.run([s for s, p in enumerate(prompts) for _ in p], [t for p in prompts for t in p])
        r.run([1, 0, 2, 0, 1, 2, 2], ids(rng, 7))


def test_refusals_leave_the_model_unchanged(tmp_path, where):
    rng = np.random.default_rng(179)
    path = tmp_path / "m.gguf"
    w = base.write_model(path, base.make_weights(rng), "q8_0")
    n_ctx = 12
    with Llama(path, ctx=where, n_ctx=n_ctx, activations="f32", kv_type="f16", max_sequences=3) as m:
        h = m.handle
        r = Histories(m, w, llama_ref("f16"), 2e-3)
        r.run([0] * 4 + [1] * 10, ids(rng, 14))
        before = [m.seq_n_past(s) for s in range(3)]
        poison = np.full(4 * V, 7.0, np.float32)
        bad = [
            (tc.TC_ERR_INVALID_ARG, [0, 3], [1, 1], None, "seqs[1] is 3, outside [0, 3)"),
            (tc.TC_ERR_INVALID_ARG, [-1], [1], None, "seqs[0] is -1"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [1, V], None, "tokens[1]"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [-1, 1], None, "tokens[0]"),
            (tc.TC_ERR_INVALID_SHAPE, [0, 1, 1, 1], [1, 1, 1, 1], None, "row 3 overflows sequence 1"),
            (tc.TC_ERR_INVALID_SHAPE, [], [], None, "n = 0"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [1, 1], [True], "1 want flags for 2 rows"),
            (tc.TC_ERR_INVALID_ARG, [0, 2], [1], None, "2 sequences and 1 tokens"),
        ]
        for status, seqs, toks, want, text in bad:
            out = poison.copy()
            expect_status(status, tc.llama_eval_batch, h, seqs, toks, want, out, text=text)
            assert (out == 7.0).all(), "logits written by a refused batch %r" % (seqs,)
            assert [m.seq_n_past(s) for s in range(3)] == before
        small = poison[:2 * V - 1].copy()
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_eval_batch, h, [0, 2, 0], [1, 1, 1], [1, 0, 1], small,
                      text="need 2 wanted rows")
        assert (small == 7.0).all()
        raw = tc._api.llama._tc_llama_eval_batch
        assert raw(h, None, None, 1, None, None, 0) == tc.TC_ERR_INVALID_ARG
        assert "seqs is null" in tc.last_error_detail()
        one = (ctypes.c_int32 * 1)(0)
        assert raw(h, one, None, 1, None, None, 0) == tc.TC_ERR_INVALID_ARG
        assert "tokens is null" in tc.last_error_detail()
        assert raw(h, one, one, 1, None, None, 5) == tc.TC_ERR_INVALID_ARG  # a capacity without an array
        assert "without a logits array" in tc.last_error_detail()
        assert [m.seq_n_past(s) for s in range(3)] == before
        # The caches are as they were: batches go on from them.
        r.run([2, 0, 2, 1], ids(rng, 4))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_q8_0_cache_in_batches(tmp_path, where, monkeypatch, arch):
    """A Q8_0 cache (64-dim heads): the packs of grouped prompts dequantise
    the cache rows of several slots in one conversion; every row against
    the reference with K and V through Q8_0, within a fraction of the
    quantisation's own effect (as test_llama_kv_q8)."""
    if arch == "llama":
        monkeypatch.setitem(archs.ARCHS, "llama", dict(layers=2, D=64))
    rng = np.random.default_rng(183 + len(arch))
    path = tmp_path / "m.gguf"
    w = archs.write_model(path, arch, archs.make_weights(rng, arch))
    prompts = [ids(rng, 6) for _ in range(3)]
    ref8 = lambda w, h: archs.reference(arch, w, np.asarray(h), "q8_0")
    effect = max(np.abs(ref8(w, p) - archs.reference(arch, w, np.asarray(p))).max() /
                 np.abs(archs.reference(arch, w, np.asarray(p))).max() for p in prompts)
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type="q8_0", max_sequences=3) as m:
        r = Histories(m, w, ref8, max(5e-5, 0.4 * effect))
        r.run([s for s in range(3) for _ in range(6)], [t for p in prompts for t in p])
        r.run([0, 1, 2, 2, 0, 1], ids(rng, 6))


REAL_FILES = {"smollm2": smollm2_path, "gemma3": gemma3_path}


@pytest.mark.parametrize("activations", ["f32", "f16"])
@pytest.mark.parametrize("name", list(REAL_FILES))
def test_prompts_of_a_real_file_as_one_batch(where, name, activations):
    """Files we did not write (SmolLM2-135M: Q4_1 matrices, a tied Q8_0
    embedding, 3 KV heads; Gemma 3 270M: the Q4_K_M mix, 256-dim heads, Q/K
    and post-branch norms, GEGLU, sliding-window layers): four prompts of
    different lengths as one batch, every row against the same prompt
    evaluated alone; then one batch step of all four against each
    sequence's own one-token step, and the greedy step's ids against that
    step's argmax. The lone evaluations are the paths
    test_llama and bench/llama_logits_vs_llamacpp.py check against the
    float64 forward. f32 activations and cache: the same numbers but for
    the order of sums; the defaults (f16 activations and cache): on a
    device the lone short prompts take the 8-bit products where the batch's
    rows take f16 GEMMs, so two readings within the 8-bit contract: a row's
    logits within 5% of the other's (2-norms) at the median (the bound
    bench/llama_logits_vs_llamacpp.py sets against llama.cpp), 20% at most,
    and the same argmax at nine rows in ten."""
    path = REAL_FILES[name]()
    if path is None:
        pytest.skip("the %s package is not installed" % name)
    texts = ["The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n",
             "Once upon a time, in a land far away, there lived a", "1, 1, 2, 3, 5, 8, 13,"]

    def distance(a, b):  # per row: f32, of the largest logit; f16, 2-norms
        if activations == "f32":
            return np.abs(a - b).max(axis=-1) / np.abs(b).max(axis=-1)
        return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)

    tol, median, agree = (5e-5, 5e-5, 1.0) if activations == "f32" else (0.2, 0.05, 0.9)
    with Llama(path, ctx=where, n_ctx=64, activations=activations, kv_type=activations, max_sequences=4) as m:
        prompts = [m.tokenize(t) for t in texts]
        nxt = [int(t) for t in np.random.default_rng(5).integers(0, m.n_vocab, len(prompts))]
        alone, alone_step = [], []
        for p, t in zip(prompts, nxt):
            m.reset()
            alone.append(m.eval(p))
            alone_step.append(m.eval([t], last_only=True))
        m.reset()
        seqs = [s for s, p in enumerate(prompts) for _ in p]
        out = m.eval_batch(seqs, [t for p in prompts for t in p], want="all")
        step = m.decode_batch(list(range(len(prompts))), nxt)
        # The same prompts and step again, the next tokens picked where the step ran.
        for s in range(len(prompts)):
            m.reset(seq=s)
        m.eval_batch(seqs, [t for p in prompts for t in p])
        greedy = m.decode_batch_greedy(list(range(len(prompts))), nxt)
    assert greedy.tolist() == step.argmax(1).tolist()
    got = np.split(out, np.cumsum([len(p) for p in prompts])[:-1])
    for a, b in zip(got, alone):
        assert a.shape == b.shape and np.isfinite(a).all()
    err = np.concatenate([distance(a, b) for a, b in zip(got, alone)])
    same = sum(int((a.argmax(1) == b.argmax(1)).sum()) for a, b in zip(got, alone))
    print("rows: median %.3g, most %.3g, argmax %d of %d" % (np.median(err), err.max(), same, err.size))
    assert err.max() < tol and np.median(err) <= median, np.round(err, 6)
    assert same >= agree * err.size, "argmax agrees at %d of %d rows" % (same, err.size)
    step_err = distance(step, np.asarray(alone_step))
    assert np.isfinite(step).all() and step_err.max() < tol, step_err
