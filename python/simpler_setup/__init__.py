"""simpler_setup: compiling kernels and orchestrations, scene tests, and the
helpers around them (see simpler-python-api.md for the original's surface).

    KernelCompiler(platform=...)         compile_incore / compile_orchestration (cached)
    scene_test / SceneTestCase           declarative tests, pytest or standalone
    Tensor, Scalar, TaskArgsBuilder, CallableNamespace
    make_chip_tensor_arg, numpy_dtype_to_datatype, torch_dtype_to_datatype
    parse_platform, RuntimeBuilder
    ensure_pto_isa_root, extract_text_section   (Ascend only: they raise)
"""

from __future__ import annotations

from .args import (CallableNamespace, Scalar, TaskArgsBuilder, Tensor, build_chip_task_args, make_chip_tensor_arg,
                   numpy_dtype_to_datatype, torch_dtype_to_datatype)
from .ascend import ensure_pto_isa_root, extract_text_section
from .kernel_compiler import CacheWarning, CompileError, KernelCompiler, get_include_dir
from .platforms import SUPPORTED_PLATFORMS, available_platforms, parse_platform
from .runtime_builder import RuntimeBuilder
from .scene_test import SceneTestCase, scene_test

__all__ = [
    "KernelCompiler", "CompileError", "CacheWarning", "get_include_dir", "get_orchestration_include_dirs",
    "scene_test", "SceneTestCase",
    "Tensor", "Scalar", "TaskArgsBuilder", "CallableNamespace", "build_chip_task_args",
    "make_chip_tensor_arg", "numpy_dtype_to_datatype",
    "parse_platform", "available_platforms", "SUPPORTED_PLATFORMS", "RuntimeBuilder",
    "ensure_pto_isa_root", "extract_text_section",
]

try:  # torch interop only where torch is importable
    import torch as _torch  # noqa: F401

    __all__.append("torch_dtype_to_datatype")
except ImportError:
    del torch_dtype_to_datatype


def get_orchestration_include_dirs(runtime: str = "tensormap_and_ringbuffer") -> list[str]:
    """Include directories of orchestration (and kernel) sources."""
    return KernelCompiler().get_orchestration_include_dirs(runtime)
