"""Diagnostics files of a run, parsed: swimlane records and their Chrome
trace, deps.json, scope_stats.jsonl, the argument dump (replayed), pmu.csv."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from conftest_simpler import cases, cpu_worker  # noqa: F401
from simpler import Worker
from simpler.task_interface import CallConfig, ChipStorageTaskArgs
from simpler_setup.tools.args_dump import load_args_dump
from simpler_setup.tools.deps import load_deps, to_dot
from simpler_setup.tools.swimlane_converter import convert, main as convert_main

N = 256


@pytest.fixture(scope="module", params=["tensormap_and_ringbuffer", "host_build_graph"])
def diamond_run(request, tmp_path_factory):
    """The diamond example with every diagnostic on (swimlane level 4)."""
    from diamond.main import TestDiamond, TestDiamondHostBuildGraph

    cls = TestDiamond if request.param == "tensormap_and_ringbuffer" else TestDiamondHostBuildGraph
    prefix = tmp_path_factory.mktemp(request.param)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    f = np.full(N, np.nan, np.float32)
    with Worker(2, platform="cpu", runtime=request.param) as w:
        w.init()
        args = ChipStorageTaskArgs()
        for x in (a, b, f):
            args.add_tensor(x)
        cfg = CallConfig(enable_chip_swimlane=4, enable_dump_args=1, enable_pmu=2, enable_dep_gen=1,
                         enable_scope_stats=1, output_prefix=str(prefix))
        w.run(w.register(cls.compile_chip_callable("cpu")), args, cfg)
        cores = w.info["num_cores"]
    c = a.astype(np.float64) + b
    np.testing.assert_allclose(f, (c + 1) * (c + 2) + c, rtol=1e-5, atol=1e-5)
    return {"prefix": prefix, "a": a, "b": b, "f": f, "cores": cores, "runtime": request.param}


def test_swimlane_records_and_trace(diamond_run, tmp_path):
    rec = json.loads((diamond_run["prefix"] / "l2_perf_records.json").read_text())
    assert rec["level"] == 4 and rec["status"] == "ok" and rec["cores"] == diamond_run["cores"]
    assert len(rec["tasks"]) == 5 and all(t["state"] == "done" for t in rec["tasks"])
    for t in rec["tasks"]:
        assert 0 <= t["t_ready"] <= t["t_start"] <= t["t_end"] <= t["t_finish"] <= rec["wall_ns"]
        assert t["t_submit"] <= t["t_submitted"]
        if diamond_run["runtime"] == "tensormap_and_ringbuffer":
            assert t["t_submit"] <= t["t_ready"]
    assert {b["task"] for b in rec["blocks"]} == {t["id"] for t in rec["tasks"]}
    assert all(0 <= b["core"] < rec["cores"] and b["t_start"] <= b["t_end"] for b in rec["blocks"])
    # c -> d, c -> e, (d, e) -> g, (g, c) -> f: 6 dependencies, the creator edges included.
    edges = {tuple(e) for e in rec["edges"]}
    seq = {t["id"]: i for i, t in enumerate(sorted(rec["tasks"], key=lambda t: t["t_submit"]))}
    assert {(seq[p], seq[s]) for p, s in edges} == {(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 4)}
    assert len(rec["orchestrator"]) == 5
    phases = {s["phase"] for s in rec["sched"]}
    assert "complete" in phases and phases <= {"idle", "steal", "complete"}
    assert all(s["t0"] <= s["t1"] and 0 <= s["core"] < rec["cores"] for s in rec["sched"])
    # A dependency's consumer starts after its producer ended.
    by_id = {t["id"]: t for t in rec["tasks"]}
    for p, s in edges:
        assert by_id[p]["t_end"] <= by_id[s]["t_start"]

    trace = convert(diamond_run["prefix"])
    ev = trace["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X" and e["cat"] == "task"]
    assert len(slices) == len(rec["blocks"])
    starts = [e for e in ev if e["ph"] == "s"]
    finishes = [e for e in ev if e["ph"] == "f"]
    assert len(starts) == len(finishes) == len(edges)
    assert all(f["bp"] == "e" for f in finishes)
    assert any(e["ph"] == "X" and e["cat"] == "orchestrator" for e in ev)
    assert any(e["ph"] == "M" and e["args"].get("name") == "core 0" for e in ev)
    out = tmp_path / "trace.json"
    assert convert_main([str(diamond_run["prefix"]), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_dep_gen(diamond_run):
    deps = load_deps(diamond_run["prefix"])
    assert len(deps["tasks"]) == 5 and deps["status"] == "ok"
    first = deps["tasks"][0]
    assert first["func_id"] == 0 and [a["access"] for a in first["args"]] == ["in", "in", "out"]
    assert first["args"][2]["created"] and not first["args"][0]["created"]
    assert first["args"][0]["shape"] == [N] and first["args"][0]["dtype"] == "f32"
    scal = deps["tasks"][1]["args"][-1]
    assert scal["kind"] == "scalar" and scal["value"] == np.float32(1.0).view(np.uint32)
    sources = {(e["source"]) for e in deps["edges"]}
    assert sources == {"creator", "tensormap"}
    assert all(e["overlap"] in ("exact", "range", "box", "bounding") for e in deps["edges"])
    kinds = {t["kind"] for t in deps["tensors"]}
    assert kinds == {"created", "external"}
    assert sum(t["kind"] == "created" for t in deps["tensors"]) == 4
    assert all(t["creator"] is not None for t in deps["tensors"] if t["kind"] == "created")
    assert to_dot(deps).startswith("digraph deps {")


def test_scope_stats(diamond_run):
    lines = (diamond_run["prefix"] / "scope_stats" / "scope_stats.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    meta = rows[0]
    assert meta["type"] == "meta" and len(meta["rings"]) == 4 and meta["runtime"] == diamond_run["runtime"]
    assert all(r["heap"] >= 1024 for r in meta["rings"])
    if diamond_run["runtime"] == "tensormap_and_ringbuffer":
        assert all(r["task_window"] >= 4 and r["dep_pool"] >= 4 for r in meta["rings"])
    samples = rows[1:]
    begins = [r for r in samples if r["type"] == "begin"]
    ends = [r for r in samples if r["type"] == "end"]
    assert len(begins) == len(ends) == 2  # the outer PTO2_SCOPE and the inner one
    assert sorted(r["depth"] for r in begins) == [1, 2]
    for r in samples:
        assert 0 <= r["tasks"] and r["heap_used"] <= r["heap"] and r["tensormap"] >= 0
    inner_end = next(r for r in ends if r["depth"] == 2)
    if diamond_run["runtime"] == "tensormap_and_ringbuffer":
        assert inner_end["ring"] == 2 and inner_end["heap_used"] > 0


def test_args_dump_replays(diamond_run):
    tasks = load_args_dump(diamond_run["prefix"])
    assert len(tasks) == 5
    a, b, f = diamond_run["a"], diamond_run["b"], diamond_run["f"]
    t0 = tasks[0]
    np.testing.assert_array_equal(t0["args"][0]["before"], a)
    np.testing.assert_array_equal(t0["args"][1]["before"], b)
    c = t0["args"][2]["after"]
    np.testing.assert_array_equal(c, a + b)
    assert t0["args"][2]["before"] is None and t0["args"][0]["after"] is None
    # Replay every task from its dumped inputs and compare with its dumped output.
    ops = {0: lambda x, y: x + y, 2: lambda x, y: x * y}
    for t in tasks:
        ins = [x["before"] for x in t["args"] if x["kind"] == "tensor" and x["before"] is not None]
        out = [x["after"] for x in t["args"] if x["kind"] == "tensor" and x["after"] is not None][0]
        if t["func_id"] == 1:
            s = np.uint32(t["args"][-1]["value"]).view(np.float32)
            np.testing.assert_array_equal(out, ins[0] + s)
        else:
            np.testing.assert_array_equal(out, ops[t["func_id"]](*ins))
    np.testing.assert_array_equal(tasks[-1]["args"][2]["after"], f)


def test_pmu_zeros_on_cpu(diamond_run):
    with open(diamond_run["prefix"] / "pmu.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5
    assert all(r["event_type"] == "2" for r in rows)
    assert all(float(r[f"counter{i}"]) == 0 for r in rows for i in range(8))
    names = json.loads((diamond_run["prefix"] / "pmu_metrics.json").read_text())
    assert names["platform"] == "cpu" and names["counters"] == ["none"] * 8


def test_failed_run_still_writes_diagnostics(cases, tmp_path):
    with Worker(2, platform="cpu") as w:
        w.init()
        x = np.zeros(1, np.float32)
        args = ChipStorageTaskArgs()
        args.add_tensor(x)
        args.add_scalar(30)
        with pytest.raises(Exception, match="SIGSEGV"):
            w.run(w.register(cases.chip("orch_poison")), args,
                  CallConfig(enable_chip_swimlane=1, enable_dep_gen=1, output_prefix=str(tmp_path)))
    rec = json.loads((tmp_path / "l2_perf_records.json").read_text())
    assert rec["status"] == "failed"
    assert sorted(t["state"] for t in rec["tasks"]) == ["cancelled", "done", "failed"]
    deps = load_deps(tmp_path)
    assert [t["state"] for t in deps["tasks"]] == ["done", "failed", "cancelled"]
    trace = convert(tmp_path)
    assert any(e["ph"] == "i" and "cancelled" in e["name"] for e in trace["traceEvents"])
