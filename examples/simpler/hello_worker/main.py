"""hello_worker: open a Worker, run an orchestration that only logs, close.

    python examples/simpler/hello_worker/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import parse_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs  # noqa: E402
from simpler_setup import KernelCompiler  # noqa: E402

HERE = Path(__file__).resolve().parent


def run(platform: str = "cpu", runtime: str = "tensormap_and_ringbuffer") -> dict:
    kc = KernelCompiler(platform=platform)
    orch = kc.compile_orchestration(runtime, HERE / "hello_orch.cpp")
    chip = ChipCallable.build(signature=[D.SCALAR], func_name="hello_orchestration", binary=orch)
    with Worker(2, platform=platform, runtime=runtime) as w:
        w.init()
        info = w.info
        print(f"Worker on {info['platform']} ({info['device']}), {info['num_cores']} cores, runtime {info['runtime']}")
        handle = w.register(chip)
        args = ChipStorageTaskArgs()
        args.add_scalar(42)
        w.run(handle, args)
        w.unregister(handle)
    return info


if __name__ == "__main__":
    a = parse_args(__doc__)
    run(a.platform, a.runtime)
