"""vector_add: out = a + b, one kernel launched as four SPMD blocks.

    python examples/simpler/vector_add/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import kernel_source, parse_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import (ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor,  # noqa: E402
                                    CoreCallable, DataType)
from simpler_setup import KernelCompiler  # noqa: E402

HERE = Path(__file__).resolve().parent


def build(platform: str, runtime: str) -> ChipCallable:
    kc = KernelCompiler(platform=platform)
    kernel = kc.compile_incore(kernel_source(platform, "add"), core_type="aiv",
                               extra_include_dirs=kc.get_orchestration_include_dirs(runtime))
    orch = kc.compile_orchestration(runtime, HERE / "vector_add_orch.cpp")
    add = CoreCallable.build(signature=[D.IN, D.IN, D.OUT], binary=kernel)
    return ChipCallable.build(signature=[D.IN, D.IN, D.OUT], func_name="vector_add_orchestration", binary=orch,
                              children=[(0, add)])


def run(platform: str = "cpu", runtime: str = "tensormap_and_ringbuffer", n: int = 100_000) -> np.ndarray:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    chip = build(platform, runtime)
    with Worker(2, platform=platform, runtime=runtime) as w:
        w.init()
        handle = w.register(chip)
        pa, pb, pout = (w.malloc(n * 4) for _ in range(3))
        w.copy_to(pa, a)
        w.copy_to(pb, b)
        w.copy_to(pout, np.full(n, np.nan, np.float32))  # poisoned: every element must be written
        args = ChipStorageTaskArgs()
        for p in (pa, pb, pout):
            args.add_tensor(ChipTensor.make(p, (n,), DataType.FLOAT32))
        w.run(handle, args)
        out = np.empty(n, np.float32)
        w.copy_from(out, pout)
    np.testing.assert_allclose(out, a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)
    print(f"vector_add on {platform} ({runtime}): {n} elements ok")
    return out


if __name__ == "__main__":
    a = parse_args(__doc__)
    run(a.platform, a.runtime)
