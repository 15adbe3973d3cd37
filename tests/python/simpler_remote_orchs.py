"""Orchestration functions the level-4 tests run on remote level-3 Workers
(imported there by name: RemoteCallable("simpler_remote_orchs:gemm"))."""

from __future__ import annotations

import os
import time

from simpler.task_interface import ArgDirection as D, ChipCallable, CoreCallable


def gemm_chip() -> ChipCallable:
    return ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])


def gemm(orch, args, cfg):
    """C = A @ B on chip 0 of the remote Worker."""
    orch.submit_next_level(gemm_chip(), args, worker=0)


def nap(orch, args, cfg):
    time.sleep(args._scalars[0] / 1000.0)


def fail(orch, args, cfg):
    raise RuntimeError("remote orchestration failed on purpose")


def pid(orch, args, cfg):
    os.getpid()


def fail_after(orch, args, cfg):
    time.sleep(args._scalars[0] / 1000.0)
    raise RuntimeError(f"failed on purpose after {args._scalars[0]} ms")
