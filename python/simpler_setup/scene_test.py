"""Declarative scene tests: @scene_test(level, runtime) + SceneTestCase.

A scene test class states

  CALLABLE  what to build: {"orchestration": {"source", "function_name",
            "signature"}, "incores": [{"func_id", "source", "core_type",
            "signature"} | {"func_id", "builtin": "gemm", "params": {...}}]}.
            A source may be one path or {"cpu": path, "cuda": path}; relative
            paths are relative to the test's file.
  CASES     how to run: [{"name", "platforms": ["cpu", "cuda"], "config":
            {CallConfig fields}, "params": {...}}]
  generate_args(params) -> TaskArgsBuilder   and   compute_golden(args, params)

Each case becomes a pytest test per platform (skipped where the platform is
absent); outputs (OUT/INOUT tensors) are compared with the golden values at
RTOL = ATOL = 1e-5 unless the class says otherwise. Run a file standalone
with `python test_x.py -p cpu` when it ends in `scene_test.main()`.

At level 3 the case runs through a Worker(3) whose orchestration function
hands the ChipCallable to its chip, at level 4 through a Worker(4) whose
orchestration hands that function to an attached Worker(3); the tensors
then travel in shared buffers.

Compiled callables are cached for the process (and on disk by
KernelCompiler); Workers are shared per (level, platform, runtime) and
closed at exit.
"""

from __future__ import annotations

import argparse
import atexit
import inspect
import os
import sys
import threading
from pathlib import Path

from simpler import SimplerUnsupportedError
from simpler._errors import UNSUPPORTED
from simpler.task_interface import CallConfig, ChipCallable, CoreCallable

from .args import Scalar, TaskArgsBuilder, Tensor, build_chip_task_args
from .kernel_compiler import KernelCompiler
from .platforms import available_platforms, parse_platform

__all__ = ["scene_test", "SceneTestCase", "main", "get_worker", "get_hier_worker", "clear_compile_cache"]

_lock = threading.Lock()
_compile_cache: dict = {}
_workers: dict = {}


def clear_compile_cache() -> None:
    _compile_cache.clear()


def get_worker(platform: str, runtime: str):
    """A shared, initialised Worker for (platform, runtime)."""
    from simpler import Worker

    key = (platform, runtime)
    with _lock:
        w = _workers.get(key)
        if w is None:
            name, dev = parse_platform(platform)
            w = Worker(2, platform=name, runtime=runtime, device_id=dev)
            w.init()
            _workers[key] = w
        return w


def get_hier_worker(level: int, platform: str, runtime: str):
    """A shared, initialised Worker(3) with one chip (the platform's
    device), or a Worker(4) with such a Worker(3) attached as worker 0.
    Returns (the Worker to run on, the level-3 Worker that registers chips)."""
    from simpler import Worker

    key = (level, platform, runtime)
    with _lock:
        got = _workers.get(key)
        if got is None:
            name, dev = parse_platform(platform)
            w3 = Worker(3, platform=name, runtime=runtime, device_ids=[dev])
            top = w3
            if level == 4:
                top = Worker(4, platform=name)
                top.add_worker(w3)
            top.init()
            got = _workers[key] = (top, w3)
        return got


@atexit.register
def _close_workers() -> None:
    for w in list(_workers.values()):
        try:
            (w[0] if isinstance(w, tuple) else w).close()  # a level-4 Worker closes its level-3 child too
        except Exception:
            pass
    _workers.clear()


def _resolve(path, base: Path, platform: str) -> str:
    if isinstance(path, dict):
        if platform not in path:
            raise SimplerUnsupportedError(UNSUPPORTED, f"no source for platform '{platform}' (have {sorted(path)})")
        path = path[platform]
    p = Path(path)
    return str(p if p.is_absolute() else base / p)


class SceneTestCase:
    """Base class of scene tests (see the module docstring)."""

    CALLABLE: dict = {}
    CASES: list = []
    RTOL = 1e-5
    ATOL = 1e-5
    _st_level = 2
    _st_runtime = "tensormap_and_ringbuffer"
    _st_dir = Path(".")

    def generate_args(self, params: dict) -> TaskArgsBuilder:
        raise NotImplementedError

    def compute_golden(self, args: TaskArgsBuilder, params: dict) -> None:
        raise NotImplementedError

    # ---- building ---------------------------------------------------------------

    @classmethod
    def compile_chip_callable(cls, platform: str) -> ChipCallable:
        name, _ = parse_platform(platform)
        key = (cls.__module__, cls.__qualname__, name, cls._st_runtime)
        with _lock:
            if key in _compile_cache:
                return _compile_cache[key]
        spec = cls.CALLABLE
        orch = spec["orchestration"]
        kc = KernelCompiler(platform=name)
        orch_bin = kc.compile_orchestration(cls._st_runtime, _resolve(orch["source"], cls._st_dir, name))
        inc = kc.get_orchestration_include_dirs(cls._st_runtime)
        children = []
        for k in spec.get("incores", []):
            if "builtin" in k:
                core = CoreCallable.builtin(k["builtin"], **k.get("params", {}))
            else:
                binary = kc.compile_incore(_resolve(k["source"], cls._st_dir, name), core_type=k.get("core_type", "aiv"),
                                           extra_include_dirs=inc)
                core = CoreCallable.build(signature=k.get("signature", []), binary=binary)
            children.append((k["func_id"], core))
        chip = ChipCallable.build(signature=orch.get("signature", []), func_name=orch["function_name"],
                                  binary=orch_bin, children=children, config_name=orch.get("config_name", ""))
        with _lock:
            _compile_cache[key] = chip
        return chip

    def build_callable(self, platform: str) -> ChipCallable:
        return type(self).compile_chip_callable(platform)

    @staticmethod
    def _build_config(config: dict | None) -> CallConfig:
        return CallConfig.from_dict(config or {})

    # ---- running ----------------------------------------------------------------

    def run_case(self, case: dict, platform: str, worker=None, config: dict | None = None, rounds: int = 1):
        """Builds, runs and checks one case; returns the outputs."""
        if self._st_level >= 3:
            if parse_platform(platform)[0] != "cpu" and not os.environ.get(_FRESH_ENV):
                return self._run_case_fresh(case, platform, config, rounds)
            return self._run_case_hier(case, platform, config, rounds)
        worker = worker or get_worker(platform, self._st_runtime)
        chip = self.build_callable(platform)
        handle = worker.register(chip)
        try:
            params = case.get("params", {})
            cfg = dict(case.get("config", {}))
            cfg.update(config or {})
            signature = self.CALLABLE["orchestration"].get("signature", [])
            for _ in range(rounds):
                args = self.generate_args(params)
                golden = args.clone()
                self.compute_golden(golden, params)
                chip_args, outputs = build_chip_task_args(args, signature)
                worker.run(handle, chip_args, self._build_config(cfg))
                _compare_outputs(args, golden, outputs, self.RTOL, self.ATOL)
            return {n: getattr(args, n) for n in outputs}
        finally:
            worker.unregister(handle)


    def _run_case_fresh(self, case: dict, platform: str, config: dict | None, rounds: int):
        """A GPU case at level 3 or 4 in a new interpreter (this file's
        standalone runner): a level-3 Worker forks its chip children, and a
        child forked from a process that has already used the GPU (a level-2
        case before this one, say) cannot initialise it. Returns {}: the
        outputs stay in that process, which checked them against the golden."""
        import subprocess

        if config:
            raise ValueError("scene_test: a config override is not passed to a fresh interpreter")
        file = inspect.getfile(type(self))
        label = f"{type(self).__name__}::{case['name']}"
        cmd = [sys.executable, file, "-p", platform, "--case", label, "--rounds", str(rounds)]
        proc = subprocess.run(cmd, env=dict(os.environ, **{_FRESH_ENV: "1"}), capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0 or f"PASS {label}" not in proc.stdout:
            raise AssertionError(f"{label} [{platform}] in a fresh interpreter (exit {proc.returncode}):\n"
                                 f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
        return {}

    def _run_case_hier(self, case: dict, platform: str, config: dict | None, rounds: int):
        """The case through a level-3 Worker (its orchestration function
        hands the ChipCallable to chip 0) or a level-4 one (whose
        orchestration hands that function to its level-3 worker 0): the
        tensors live in shared buffers (create_buffer), filled from the
        generated arrays and copied back into them before the comparison."""
        import numpy as np

        from simpler.task_interface import ArgDirection, ChipStorageTaskArgs

        top, w3 = get_hier_worker(self._st_level, platform, self._st_runtime)
        handle = w3.register(self.build_callable(platform))
        params = case.get("params", {})
        cfg = dict(case.get("config", {}))
        cfg.update(config or {})
        call_config = self._build_config(cfg)
        signature = self.CALLABLE["orchestration"].get("signature", [])
        tensor_dirs = [d for d in signature if ArgDirection(d) != ArgDirection.SCALAR]
        for _ in range(rounds):
            args = self.generate_args(params)
            golden = args.clone()
            self.compute_golden(golden, params)
            chip_args, outputs, staged = ChipStorageTaskArgs(), [], []
            try:
                ti = 0
                for spec in args.specs:
                    if not isinstance(spec, Tensor):
                        chip_args.add_scalar(spec.value)
                        continue
                    arr = np.ascontiguousarray(_to_numpy(spec.value))
                    buf = top.create_buffer(max(1, arr.nbytes))
                    buf.numpy(dtype="uint8")[:arr.nbytes] = arr.reshape(-1).view(np.uint8)
                    chip_args.add_tensor(buf.tensor(arr.shape, arr.dtype))
                    staged.append((spec, arr, buf))
                    if ti < len(tensor_dirs) and ArgDirection(tensor_dirs[ti]) in (ArgDirection.OUT,
                                                                                    ArgDirection.INOUT):
                        outputs.append(spec.name)
                    ti += 1

                def orch3(o, _args, _cfg):
                    o.submit_next_level(handle, chip_args, call_config, worker=0)

                if self._st_level == 3:
                    top.run(orch3)
                else:
                    top.run(lambda o, _a, _c: o.submit_next_level(orch3, None, worker=0))
                for spec, arr, buf in staged:
                    if spec.name in outputs:
                        out = buf.numpy(dtype="uint8")[:arr.nbytes].view(arr.dtype).reshape(arr.shape)
                        np.copyto(_to_numpy(getattr(args, spec.name)), out)
            finally:
                for _, _, buf in staged:
                    buf.close()
            _compare_outputs(args, golden, outputs, self.RTOL, self.ATOL)
        w3.unregister(handle)
        return {n: getattr(args, n) for n in outputs}


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    import numpy as np

    return np.asarray(x)


def _compare_outputs(test_args, golden_args, output_names, rtol, atol) -> None:
    import numpy as np

    for name in output_names:
        actual = _to_numpy(getattr(test_args, name)).astype(np.float64)
        expected = _to_numpy(getattr(golden_args, name)).astype(np.float64)
        if actual.shape != expected.shape:
            raise AssertionError(f"Golden mismatch on '{name}': shape {actual.shape} vs {expected.shape}")
        ok = np.isclose(actual, expected, rtol=rtol, atol=atol)
        if not ok.all():
            bad = np.argwhere(~ok)
            i = tuple(bad[0])
            diff = float(np.nanmax(np.abs(actual - expected))) if np.isfinite(actual).all() else float("nan")
            raise AssertionError(f"Golden mismatch on '{name}': {len(bad)} of {ok.size} elements differ, first at {i}: "
                                 f"{actual[i]} vs {expected[i]} (max diff {diff}, rtol={rtol}, atol={atol})")


# Set in the interpreter a GPU case of level 3 or 4 runs in (see _run_case_fresh).
_FRESH_ENV = "SIMPLER_SCENE_FRESH_PROCESS"


def scene_test(level: int = 2, runtime: str = "tensormap_and_ringbuffer"):
    """Class decorator: turns CASES into test_<case name> methods."""
    if level not in (2, 3, 4):
        raise SimplerUnsupportedError(UNSUPPORTED, f"scene_test(level={level}): levels 2, 3 and 4 are built")
    if runtime not in ("tensormap_and_ringbuffer", "host_build_graph"):
        raise ValueError(f"scene_test: unknown runtime '{runtime}'")

    def decorate(cls):
        cls._st_decorated = True
        cls._st_level = level
        cls._st_runtime = runtime
        cls._st_dir = Path(inspect.getfile(cls)).resolve().parent
        for case in cls.CASES:
            _add_case(cls, case)
        return cls

    return decorate


def _add_case(cls, case: dict) -> None:
    platforms = [p for p in case.get("platforms", ["cpu"])]

    def test(self, st_platform):
        name, _ = parse_platform(st_platform)
        if name not in available_platforms():
            _skip(f"platform '{st_platform}' is not available here")
        self.run_case(case, st_platform)

    test.__name__ = f"test_{case['name']}"
    test.__doc__ = f"Scene case '{case['name']}'"
    try:
        import pytest

        test = pytest.mark.parametrize("st_platform", platforms)(test)
    except ImportError:  # standalone without pytest: main() passes the platform
        pass
    setattr(cls, test.__name__, test)


def _skip(reason: str):
    try:
        import pytest

        pytest.skip(reason)
    except ImportError:
        raise SimplerUnsupportedError(UNSUPPORTED, reason)


def main(argv: list[str] | None = None) -> int:
    """Standalone runner: executes every scene test class of __main__."""
    ap = argparse.ArgumentParser(description="Run the scene tests of this file")
    ap.add_argument("-p", "--platform", default=os.environ.get("SIMPLER_PLATFORM", "cpu"))
    ap.add_argument("--case", action="append", default=[], help="case name (or Class::case); repeatable")
    ap.add_argument("--rounds", type=int, default=1)
    ns = ap.parse_args(argv)
    mod = sys.modules["__main__"]
    classes = [c for c in vars(mod).values()
               if inspect.isclass(c) and issubclass(c, SceneTestCase) and c.__dict__.get("_st_decorated")]
    failures = 0
    ran = 0
    for cls in classes:
        for case in cls.CASES:
            label = f"{cls.__name__}::{case['name']}"
            if ns.case and case["name"] not in ns.case and label not in ns.case:
                continue
            if parse_platform(ns.platform)[0] not in [parse_platform(p)[0] for p in case.get("platforms", ["cpu"])]:
                continue
            ran += 1
            try:
                cls().run_case(case, ns.platform, rounds=ns.rounds)
                print(f"PASS {label} [{ns.platform}]")
            except Exception as e:  # report and go on
                failures += 1
                print(f"FAIL {label} [{ns.platform}]: {e}")
    if ran == 0:
        print(f"no case runs on platform '{ns.platform}'")
    _close_workers()
    return 1 if failures else 0


# Re-exported for scene tests that build arguments themselves.
__all__ += ["Tensor", "Scalar", "TaskArgsBuilder"]
