"""Bad input and failing work: each gives a clear error naming the task, and
the Worker stays usable."""

from __future__ import annotations

import time

import numpy as np
import pytest

from conftest_simpler import cases, cpu_worker, device_f32, read_f32  # noqa: F401
from simpler import SimplerArgumentError, SimplerError, SimplerTimeoutError, Worker
from simpler.task_interface import ArgDirection as D, CallConfig, ChipStorageTaskArgs, ChipTensor, DataType


@pytest.fixture
def worker():
    w = Worker(2, platform="cpu")
    w.init()
    yield w
    w.close()


def _args(tensor, *scalars):
    a = ChipStorageTaskArgs()
    a.add_tensor(tensor)
    for s in scalars:
        a.add_scalar(s)
    return a


def _still_usable(w, cases):
    p, t = device_f32(w, [1.0])
    w.run(w.register(cases.chip("orch_chain")), _args(t, 3))
    assert read_f32(w, p, 1)[0] == 4.0


@pytest.mark.parametrize("entry, pattern", [
    ("orch_segv", r"task 0 \(func_id 1, kernel [0-9a-f]+\), block 0 of 1, faulted on core \d+: SIGSEGV"),
    ("orch_abort", r"func_id 2.*SIGABRT"),
    ("orch_throw", r"orchestration 'orch_throw' failed: C\+\+ exception: orchestration refused the input"),
    ("orch_unknown_func", r"unknown func_id 42; the ChipCallable's children are \[0, 1, 2, 3\]"),
    ("orch_bad_signature", r"task 0 \(func_id 0.*signature has 1 tensor\(s\) and 0 scalar\(s\) but the task passes 2"),
    ("orch_outside", r"task 0 \(func_id 0.*tensor argument 0 .*outside its allocation: the view reaches byte 8"),
    ("orch_report", r"reported an error in orch_report: shape 7 is not supported"),
])
def test_failures_name_the_task_and_leave_the_worker_usable(worker, cases, entry, pattern):
    p, t = device_f32(worker, [1.0])
    with pytest.raises(SimplerError, match=pattern):
        worker.run(worker.register(cases.chip(entry)), _args(t, 0))
    _still_usable(worker, cases)


def test_failed_task_poisons_its_dependent(worker, cases, tmp_path):
    # sleep (+1) -> segv -> inc: the increment after the fault must not run.
    p, t = device_f32(worker, [5.0])
    with pytest.raises(SimplerError, match="SIGSEGV"):
        worker.run(worker.register(cases.chip("orch_poison")), _args(t, 50),
                   CallConfig(enable_dep_gen=1, output_prefix=str(tmp_path)))
    assert read_f32(worker, p, 1)[0] == 6.0
    import json

    deps = json.loads((tmp_path / "deps.json").read_text())
    assert [x["state"] for x in deps["tasks"]] == ["done", "failed", "cancelled"]


def test_wrong_argument_count_and_bad_tensors(worker, cases):
    p, t = device_f32(worker, [0.0, 0.0])
    h = worker.register(cases.chip("orch_chain"))
    with pytest.raises(SimplerArgumentError, match="signature has 1 tensor.* and 1 scalar.*passes 1 tensor.* and 0"):
        worker.run(h, _args(t))
    two = ChipStorageTaskArgs()
    two.add_tensor(t)
    two.add_tensor(t)
    two.add_scalar(1)
    with pytest.raises(SimplerArgumentError, match="passes 2 tensor"):
        worker.run(h, two)
    # A device tensor reaching past its allocation (interior pointer + 2 elements).
    with pytest.raises(SimplerArgumentError, match="tensor argument 0 .*outside its allocation"):
        worker.run(h, _args(ChipTensor.make(p + 4, (2,), DataType.FLOAT32), 1))
    with pytest.raises(SimplerArgumentError, match="not a whole number of elements"):
        worker.run(h, _args(ChipTensor.make(p + 2, (1,), DataType.FLOAT32), 1))
    # The config function's count.
    with pytest.raises(SimplerArgumentError, match=r"expects 2 argument\(s\)"):
        worker.run(worker.register(cases.chip("orch_chain", [D.INOUT, D.SCALAR, D.SCALAR], "orch_chain_config")),
                   _args(t, 1, 2))
    # The interior pointer that is inside: fine.
    worker.run(h, _args(ChipTensor.make(p + 4, (1,), DataType.FLOAT32), 3))
    np.testing.assert_array_equal(read_f32(worker, p, 2), [0.0, 3.0])


def test_deadlock_is_an_error_not_a_hang(worker, cases):
    p, t = device_f32(worker, [0.0])
    t0 = time.time()
    with pytest.raises(SimplerError, match=r"deadlock: the task ring of scope depth 1 \(ring 1, 16 slots\)"):
        worker.run(worker.register(cases.chip("orch_one_scope")), _args(t, 100),
                   CallConfig(runtime_env={"ring_task_window": 16}))
    assert time.time() - t0 < 10
    _still_usable(worker, cases)


def test_submit_wait_timeout_and_order(worker, cases):
    p, t = device_f32(worker, [0.0])
    h = worker.register(cases.chip("orch_sleep"))
    runs = [worker.submit(h, _args(t, 100)) for _ in range(3)]
    with pytest.raises(SimplerTimeoutError):
        runs[0].wait(timeout=0.01)
    with pytest.raises(TimeoutError):
        runs[2].result(timeout=0.01)
    for r in runs:
        assert r.result(timeout=30) is None
        assert r.done()
    assert read_f32(worker, p, 1)[0] == 3.0
    # A failing run raises from wait(), and later runs still run.
    bad = worker.submit(worker.register(cases.chip("orch_segv")), _args(t, 0))
    good = worker.submit(h, _args(t, 1))
    with pytest.raises(SimplerError, match="SIGSEGV"):
        bad.wait()
    good.wait()
    assert read_f32(worker, p, 1)[0] == 4.0
