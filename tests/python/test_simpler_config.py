"""CallConfig.validate() rules, runtime_env ring overrides and their
precedence (call > environment > default)."""

from __future__ import annotations

import pytest

from conftest_simpler import cases, cpu_worker, device_f32, read_f32  # noqa: F401
from simpler import SimplerArgumentError, Worker
from simpler.task_interface import CallConfig, ChipStorageTaskArgs


def test_defaults_are_valid():
    CallConfig().validate()
    CallConfig(aicpu_thread_num=4, block_dim=2).validate()
    CallConfig(enable_chip_swimlane=4, output_prefix="/tmp/x").validate()


@pytest.mark.parametrize("field", ["enable_chip_swimlane", "enable_dump_args", "enable_pmu", "enable_dep_gen",
                                   "enable_scope_stats"])
def test_diagnostic_needs_output_prefix(field):
    cfg = CallConfig(**{field: 1})
    with pytest.raises(SimplerArgumentError, match=f"{field} is on but output_prefix is empty"):
        cfg.validate()
    cfg.output_prefix = "/tmp/somewhere"
    cfg.validate()


@pytest.mark.parametrize("kwargs, message", [
    ({"enable_chip_swimlane": 5}, "enable_chip_swimlane = 5"),
    ({"enable_dump_args": 2}, "enable_dump_args = 2"),
    ({"enable_pmu": -1}, "enable_pmu = -1"),
    ({"aicpu_thread_num": -1}, "aicpu_thread_num = -1"),
    ({"block_dim": -3}, "block_dim = -3"),
    ({"runtime_env": {"ring_task_window": 1000}}, r"ring_task_window\[0\] = 1000: must be a power of two"),
    ({"runtime_env": {"ring_task_window": 2}}, r"ring_task_window\[0\] = 2"),
    ({"runtime_env": {"ring_task_window": [0, 0, 0, 24]}}, r"ring_task_window\[3\] = 24"),
    ({"runtime_env": {"ring_heap": 1000}}, r"ring_heap\[0\] = 1000: must be at least 1024"),
    ({"runtime_env": {"ring_dep_pool": 3}}, r"ring_dep_pool\[0\] = 3"),
])
def test_invalid_values(kwargs, message):
    with pytest.raises(SimplerArgumentError, match=message):
        CallConfig(**kwargs).validate()


def test_runtime_env_forms():
    CallConfig(runtime_env={"ring_task_window": 64, "ring_heap": 1 << 20, "ring_dep_pool": 4}).validate()
    CallConfig(runtime_env={"ring_task_window": [16, 32, 0, 1024]}).validate()
    with pytest.raises(ValueError, match="needs 4 entries"):
        CallConfig(runtime_env={"ring_task_window": [16, 32]}).validate()
    with pytest.raises(ValueError, match="unknown key"):
        CallConfig(runtime_env={"ring_window": 16}).validate()
    with pytest.raises(ValueError, match="not a non-negative integer"):
        CallConfig(runtime_env={"ring_heap": -5}).validate()
    with pytest.raises(ValueError, match="unknown field"):
        CallConfig.from_dict({"enable_swimlane": 1})
    assert "ring_task_window" in repr(CallConfig(runtime_env={"ring_task_window": 8}))


def _chain(worker, cases, n, cfg):
    p, t = device_f32(worker, [0.0])
    args = ChipStorageTaskArgs()
    args.add_tensor(t)
    args.add_scalar(n)
    worker.run(worker.register(cases.chip("orch_chain")), args, cfg)
    out = read_f32(worker, p, 1)[0]
    worker.free(p)
    return out


def test_validate_runs_at_submit(cpu_worker, cases):
    with pytest.raises(SimplerArgumentError, match="output_prefix is empty"):
        _chain(cpu_worker, cases, 1, CallConfig(enable_dep_gen=1))
    with pytest.raises(SimplerArgumentError, match="power of two"):
        _chain(cpu_worker, cases, 1, {"runtime_env": {"ring_task_window": 6}})


def test_ring_overrides_take_effect(cpu_worker, cases):
    # orch_chain's scopes hold 64 tasks: a 64-slot window and a 64-
    # entry dependency pool wrap around many times; 32 slots cannot hold a scope.
    assert _chain(cpu_worker, cases, 500, CallConfig(runtime_env={"ring_task_window": 64, "ring_dep_pool": 64})) == 500
    with pytest.raises(Exception, match="deadlock"):
        _chain(cpu_worker, cases, 500, CallConfig(runtime_env={"ring_task_window": 32}))
    # 64 tasks in one scope do not fit 8 slots: the deadlock is reported.
    p, t = device_f32(cpu_worker, [0.0])
    args = ChipStorageTaskArgs()
    args.add_tensor(t)
    args.add_scalar(10)
    h = cpu_worker.register(cases.chip("orch_one_scope"))
    with pytest.raises(Exception, match=r"deadlock.*ring_task_window\[1\]"):
        cpu_worker.run(h, args, CallConfig(runtime_env={"ring_task_window": [0, 8, 0, 0]}))
    cpu_worker.run(h, args, CallConfig(runtime_env={"ring_task_window": [0, 32, 0, 0]}))


def test_environment_sits_between_call_and_default(cpu_worker, cases, monkeypatch):
    p, t = device_f32(cpu_worker, [0.0])
    args = ChipStorageTaskArgs()
    args.add_tensor(t)
    args.add_scalar(10)
    h = cpu_worker.register(cases.chip("orch_one_scope"))
    monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "8")
    with pytest.raises(Exception, match="deadlock"):
        cpu_worker.run(h, args)  # the environment's 8 slots are too few
    cpu_worker.run(h, args, CallConfig(runtime_env={"ring_task_window": 32}))  # the call wins
    monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "0,32,0,0")
    cpu_worker.run(h, args)
    monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "seven")
    with pytest.raises(SimplerArgumentError, match="PTO2_RING_TASK_WINDOW='seven'"):
        cpu_worker.run(h, args)


def test_host_build_graph_takes_no_ring_overrides(cases):
    with Worker(2, platform="cpu", runtime="host_build_graph") as w:
        w.init()
        with pytest.raises(SimplerArgumentError, match="applies to runtime 'tensormap_and_ringbuffer'"):
            _chain(w, cases, 1, CallConfig(runtime_env={"ring_task_window": 8}))
        assert _chain(w, cases, 100, CallConfig()) == 100
