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


def stamp_sleep(args):
    """A sub-task: writes when it started and ended (float64 seconds) around
    a nap of scalar 0 milliseconds."""
    out = args.array(0)
    out[0] = time.time()
    time.sleep(args.scalar(0) / 1000.0)
    out[1] = time.time()


def slow_stamp(orch, args, cfg):
    """Hands the nap to a sub-worker, so the orchestration returns at once
    and the session can start its next task."""
    h = orch._w.register(stamp_sleep)
    orch.submit_sub(h, args)


def affine_sub(args):
    """A sub-task: after scalar 2 milliseconds, a = a * scalar 0 + scalar 1
    (not commutative, so the order of two of them shows in the result)."""
    time.sleep(args.scalar(2) / 1000.0)
    a = args.array(0)
    a[:] = a * args.scalar(0) + args.scalar(1)


def affine(orch, args, cfg):
    orch.submit_sub(orch._w.register(affine_sub), args)


def fail_after(orch, args, cfg):
    time.sleep(args._scalars[0] / 1000.0)
    raise RuntimeError(f"failed on purpose after {args._scalars[0]} ms")
