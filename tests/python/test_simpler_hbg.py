"""host_build_graph: the orchestration runs once per (callable, arguments);
later runs replay the recorded graph on the data they find."""

from __future__ import annotations

import json

import numpy as np

from conftest_simpler import cases, device_f32, read_f32  # noqa: F401
from simpler import Worker
from simpler.task_interface import CallConfig, ChipStorageTaskArgs


def _args(t, n):
    a = ChipStorageTaskArgs()
    a.add_tensor(t)
    a.add_scalar(n)
    return a


def test_replays_reuse_the_graph_and_see_new_data(cases, tmp_path):
    with Worker(2, platform="cpu", runtime="host_build_graph") as w:
        w.init()
        h = w.register(cases.chip("orch_chain"))
        p, t = device_f32(w, [0.0])
        w.run(h, _args(t, 300))
        assert read_f32(w, p, 1)[0] == 300
        w.copy_to(p, np.array([5.0], np.float32))  # new data, same pointers: a replay
        w.run(h, _args(t, 300))
        assert read_f32(w, p, 1)[0] == 305
        info = w.info
        assert (info["graph_builds"], info["graph_replays"]) == (1, 1)
        w.run(h, _args(t, 10))  # other arguments: another graph
        assert read_f32(w, p, 1)[0] == 315
        assert w.info["graph_builds"] == 2
        # A replay still records its swimlane, with the tasks' kernels.
        w.run(h, _args(t, 10), CallConfig(enable_chip_swimlane=2, output_prefix=str(tmp_path)))
        assert w.info["graph_replays"] == 2
        rec = json.loads((tmp_path / "l2_perf_records.json").read_text())
        assert len(rec["tasks"]) == 10 and all(t["func_id"] == 0 for t in rec["tasks"])
        assert len(rec["edges"]) == 9
        # dep_gen needs the orchestration: that run records afresh.
        w.run(h, _args(t, 10), CallConfig(enable_dep_gen=1, output_prefix=str(tmp_path)))
        assert w.info["graph_builds"] == 3
        # Unregistering drops the callable's graphs.
        w.unregister(h)
        h = w.register(cases.chip("orch_chain"))
        w.run(h, _args(t, 10))
        assert w.info["graph_builds"] == 4
        assert read_f32(w, p, 1)[0] == 345


def test_a_failing_graph_is_not_cached(cases):
    with Worker(2, platform="cpu", runtime="host_build_graph") as w:
        w.init()
        h = w.register(cases.chip("orch_segv"))
        p, t = device_f32(w, [1.0])
        for _ in range(2):
            try:
                w.run(h, _args(t, 0))
            except Exception as e:
                assert "SIGSEGV" in str(e)
        assert w.info["graph_replays"] == 0 and read_f32(w, p, 1)[0] == 1.0
