"""The cuda platform (skipped where the library has no CUDA or no GPU
answers): staging of host tensors, CUDA Graph replays, diagnostics, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest_simpler import SOURCES, device_f32, read_f32
from simpler import SimplerError, Worker
from simpler.task_interface import ArgDirection as D, CallConfig, ChipCallable, ChipStorageTaskArgs, CoreCallable
from simpler_setup import KernelCompiler, available_platforms

pytestmark = pytest.mark.skipif("cuda" not in available_platforms(), reason="no usable CUDA GPU here")


@pytest.fixture(scope="module")
def chain_chip():
    kc = KernelCompiler(platform="cuda")
    inc = kc.get_orchestration_include_dirs()
    kinc = CoreCallable.build([D.INOUT], kc.compile_incore(SOURCES / "cuda" / "inc.cu", extra_include_dirs=inc))
    orch = kc.compile_orchestration("tensormap_and_ringbuffer", SOURCES / "cases_orch.cpp")
    return lambda entry="orch_chain": ChipCallable.build([D.INOUT, D.SCALAR], entry, orch, children=[(0, kinc)])


def _args(t, n):
    a = ChipStorageTaskArgs()
    a.add_tensor(t)
    a.add_scalar(n)
    return a


@pytest.mark.parametrize("runtime", ["tensormap_and_ringbuffer", "host_build_graph"])
def test_chain_on_device_and_host_tensors(chain_chip, runtime):
    with Worker(2, platform="cuda", runtime=runtime) as w:
        w.init()
        h = w.register(chain_chip())
        p, t = device_f32(w, np.zeros(1000))
        for _ in range(2):  # host_build_graph: build, then replay the CUDA Graph
            w.run(h, _args(t, 500))
        np.testing.assert_array_equal(read_f32(w, p, 1000), np.full(1000, 1000.0))
        # A host (NumPy) tensor is staged to the device and back.
        x = np.arange(8, dtype=np.float32)
        w.run(h, _args(x[::2], 3))
        np.testing.assert_array_equal(x, [3, 1, 5, 3, 7, 5, 9, 7])
        if runtime == "host_build_graph":
            assert w.info["graph_replays"] >= 1


def test_streams_and_swimlane(chain_chip, tmp_path):
    with Worker(2, platform="cuda") as w:
        w.init()
        p, t = device_f32(w, np.zeros(4))
        w.run(w.register(chain_chip()), _args(t, 200),
              CallConfig(aicpu_thread_num=8, enable_chip_swimlane=2, enable_dep_gen=1, output_prefix=str(tmp_path)))
        assert read_f32(w, p, 1)[0] == 200
    rec = json.loads((tmp_path / "l2_perf_records.json").read_text())
    assert len(rec["tasks"]) == 200 and all(t["state"] == "done" for t in rec["tasks"])
    tasks = sorted(rec["tasks"], key=lambda t: t["id"])
    for a, b in zip(tasks, tasks[1:]):  # a chain runs in order on the device
        assert a["t_end"] <= b["t_start"] + 1000


def test_dump_args_on_device(chain_chip, tmp_path):
    from simpler_setup.tools.args_dump import load_args_dump

    with Worker(2, platform="cuda") as w:
        w.init()
        p, t = device_f32(w, [5.0, 6.0])
        w.run(w.register(chain_chip()), _args(t, 3), CallConfig(enable_dump_args=1, output_prefix=str(tmp_path)))
    tasks = load_args_dump(tmp_path)
    assert [list(x["args"][0]["before"]) for x in tasks] == [[5, 6], [6, 7], [7, 8]]
    assert [list(x["args"][0]["after"]) for x in tasks] == [[6, 7], [7, 8], [8, 9]]


# CUPTI's profiler can lose the process's CUDA context, and one profiling
# session at a time is served per device (a second gets CUPTI_ERROR_UNKNOWN).
@pytest.mark.own_process(exclusive="cupti")
@pytest.mark.parametrize("event_type", [1, 2])
def test_pmu_reads_cupti_counters(chain_chip, tmp_path, event_type):
    import csv

    with Worker(2, platform="cuda") as w:
        w.init()
        p, t = device_f32(w, np.zeros(1 << 16))
        try:
            w.run(w.register(chain_chip()), _args(t, 4),
                  CallConfig(enable_pmu=event_type, output_prefix=str(tmp_path)))
        except SimplerError as e:
            if "INSUFFICIENT_PRIVILEGES" in str(e) or "performance counters" in str(e):
                pytest.skip(f"GPU counters are not open to this user: {e}")
            raise
        assert read_f32(w, p, 1)[0] == 4
    names = json.loads((tmp_path / "pmu_metrics.json").read_text())["counters"]
    assert names[0] == "gpu__time_duration.sum" and "none" not in names
    text = (tmp_path / "pmu.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    # Every kernel took some time: each task got its own range's counters.
    assert len(rows) == 4 and all(float(r["counter0"]) > 0 for r in rows), f"pmu.csv ({names}):\n{text}"
    assert len({r["task_id"] for r in rows}) == 4, f"pmu.csv:\n{text}"


def test_cpu_kernel_on_cuda_is_refused():
    kc = KernelCompiler(platform="cpu")
    so = kc.compile_incore(SOURCES / "inc.cpp")
    orch = kc.compile_orchestration("tensormap_and_ringbuffer", SOURCES / "cases_orch.cpp")
    chip = ChipCallable.build([D.INOUT, D.SCALAR], "orch_chain", orch, children=[(0, CoreCallable.build([D.INOUT], so))])
    with Worker(2, platform="cuda") as w:
        w.init()
        with pytest.raises(SimplerError, match="cuda kernels are cubins"):
            w.register(chip)


FAULT = r'''
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from conftest_simpler import SOURCES
from simpler import Worker
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor, CoreCallable, DataType
from simpler_setup import KernelCompiler
kc = KernelCompiler(platform="cuda")
inc = kc.get_orchestration_include_dirs()
k = CoreCallable.build([D.INOUT], kc.compile_incore(SOURCES / "cuda" / "fault.cu", extra_include_dirs=inc))
orch = kc.compile_orchestration("tensormap_and_ringbuffer", SOURCES / "cases_orch.cpp")
chip = ChipCallable.build([D.INOUT, D.SCALAR], "orch_chain", orch, children=[(0, k)])
w = Worker(2, platform="cuda"); w.init()
p = w.malloc(4)
a = ChipStorageTaskArgs(); a.add_tensor(ChipTensor.make(p, (1,), DataType.FLOAT32)); a.add_scalar(1)
h = w.register(chip)
for attempt in range(2):
    try:
        w.run(h, a)
        print("NO ERROR")
    except Exception as e:
        print("ERROR", e)
w.close()
'''


def test_kernel_fault_is_reported_and_the_worker_refuses_more():
    # In a child process: a fault loses the CUDA context for the whole process.
    out = subprocess.run([sys.executable, "-c", FAULT, str(Path(__file__).parent)], capture_output=True, text=True,
                         timeout=300)
    lines = [x for x in out.stdout.splitlines() if x.startswith(("ERROR", "NO ERROR"))]
    assert len(lines) == 2, out.stdout + out.stderr
    assert "a kernel failed on the GPU" in lines[0] and "ILLEGAL_ADDRESS" in lines[0]
    assert "CUDA context is lost" in lines[1]
