"""Shared by the examples: platform argument and kernel paths."""

from __future__ import annotations

import argparse
from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels"


def kernel_source(platform: str, name: str) -> Path:
    return KERNELS / platform / (f"{name}.cu" if platform == "cuda" else f"{name}.cpp")


def parse_args(description: str):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("-p", "--platform", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("-r", "--runtime", default="tensormap_and_ringbuffer",
                    choices=["tensormap_and_ringbuffer", "host_build_graph"])
    return ap.parse_args()


# ---- level-3 examples ---------------------------------------------------------------


def gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without it). Asks no CUDA API, so the process
    can still fork a level-3 Worker's children afterwards."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def l3_args(description: str):
    """-p cpu|cuda (default $SIMPLER_PLATFORM, else cpu) and -n devices (default 2)."""
    import os

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("-p", "--platform", default=os.environ.get("SIMPLER_PLATFORM", "cpu"), choices=["cpu", "cuda"])
    ap.add_argument("-n", "--devices", type=int, default=2)
    return ap.parse_args()


def compile_kernel(platform: str, name: str) -> bytes:
    from simpler_setup import KernelCompiler

    kc = KernelCompiler(platform=platform)
    return kc.compile_incore(kernel_source(platform, name), core_type="aiv",
                             extra_include_dirs=kc.get_orchestration_include_dirs("tensormap_and_ringbuffer"))
