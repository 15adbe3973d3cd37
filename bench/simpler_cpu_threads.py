"""Busy threads while simpler runs tensorcore ops on the CPU.

Runs independent f32 GEMM tasks (tensorcore's built-in gemm) on a cpu Worker
with as many core threads as the machine has cores, and samples the state of
every thread of this process from /proc: the most and the mean number
runnable at once. More runnable threads than cores means simpler's cores,
tensorcore's pool and the BLAS's threads oversubscribe the machine.

    python bench/simpler_cpu_threads.py [--size 384] [--tasks 16] [--rounds 8]
"""

import argparse
import os
import threading
import time

import numpy as np

from simpler import Worker
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, CoreCallable


def runnable_threads():
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        n += state == "R"
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    gemm = CoreCallable.builtin("gemm")
    tasks = [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2 + i)]} for i in range(a.tasks)]
    chip = ChipCallable.from_tasks([D.IN, D.IN] + [D.OUT] * a.tasks, tasks, [(0, gemm)])
    rng = np.random.default_rng(0)
    n = a.size
    A, B = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    outs = [np.zeros((n, n), np.float32) for _ in range(a.tasks)]
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(runnable_threads() - 1)  # less this sampling thread
            time.sleep(0.002)

    with Worker(cores, platform="cpu") as w:
        w.init()
        h = w.register(chip)
        args = ChipStorageTaskArgs()
        for x in [A, B] + outs:
            args.add_tensor(x)
        w.run(h, args)  # warm up: pools and BLAS threads started
        s = threading.Thread(target=sample)
        s.start()
        t0 = time.perf_counter()
        for _ in range(a.rounds):
            w.run(h, args)
        dt = time.perf_counter() - t0
        stop.set()
        s.join()
        threads = len(os.listdir("/proc/self/task"))
    np.testing.assert_allclose(outs[0], A @ B, rtol=1e-4, atol=1e-3)
    busy = np.array(samples)
    print("cores %d, threads %d, runnable: max %d, mean %.2f, >cores in %.0f%% of %d samples; %.1f GFLOP/s"
          % (cores, threads, busy.max(), busy.mean(), 100 * (busy > cores).mean(), len(busy),
             2 * n ** 3 * a.tasks * a.rounds / dt / 1e9))


if __name__ == "__main__":
    main()
