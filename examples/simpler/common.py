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
