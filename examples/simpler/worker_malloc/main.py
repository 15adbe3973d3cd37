"""worker_malloc: device memory through a Worker.

malloc returns a device pointer (an int); copy_to / copy_from move bytes
between it and any host buffer, also at an interior offset of an allocation;
free releases it. Out-of-range copies are refused and change nothing.

    python examples/simpler/worker_malloc/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import parse_args  # noqa: E402
from simpler import SimplerArgumentError, Worker  # noqa: E402


def run(platform: str = "cpu", runtime: str = "tensormap_and_ringbuffer") -> np.ndarray:
    with Worker(2, platform=platform, runtime=runtime) as w:
        w.init()
        n = 1024
        ptr = w.malloc(n * 4)
        data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        w.copy_to(ptr, data)
        # Overwrite elements 100..199 in place (an interior pointer).
        patch = np.full(100, 7.0, np.float32)
        w.copy_to(ptr + 100 * 4, patch)
        out = np.empty(n, np.float32)
        w.copy_from(out, ptr)
        expect = data.copy()
        expect[100:200] = 7.0
        assert np.array_equal(out, expect)
        # Read a slice back through an interior pointer.
        part = np.empty(10, np.float32)
        w.copy_from(part, ptr + 95 * 4)
        assert np.array_equal(part, expect[95:105])
        # A copy running past the allocation is refused.
        try:
            w.copy_to(ptr + (n - 2) * 4, np.zeros(4, np.float32))
            raise AssertionError("an out-of-range copy was accepted")
        except SimplerArgumentError as e:
            print("refused as expected:", e)
        w.free(ptr)
        print(f"round trip of {n} floats through {platform} device memory: ok")
        return out


if __name__ == "__main__":
    a = parse_args(__doc__)
    run(a.platform, a.runtime)
