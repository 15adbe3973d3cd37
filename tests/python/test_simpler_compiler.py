"""KernelCompiler (content-addressed cache, errors), platform parsing and
the rest of simpler_setup's surface."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import simpler_setup
from conftest_simpler import SOURCES
from simpler import SimplerArgumentError, SimplerError, SimplerUnsupportedError
from simpler_setup import (CallableNamespace, KernelCompiler, RuntimeBuilder, Scalar, TaskArgsBuilder, Tensor,
                           ensure_pto_isa_root, extract_text_section, make_chip_tensor_arg, numpy_dtype_to_datatype,
                           parse_platform)
from simpler.task_interface import DataType

KERNEL = """
#include "kernel.h"
#include "helper.h"
SIMPLER_KERNEL_ENTRY { SIMPLER_TENSOR_DATA(float, SIMPLER_TENSOR_ARG(args, 0))[0] = VALUE; }
"""


def test_cache_hits_and_header_edits_miss(tmp_path):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "k.cpp").write_text(KERNEL)
    (src_dir / "helper.h").write_text("#define VALUE 1.0f\n")
    kc = KernelCompiler("cpu", cache_dir=tmp_path / "cache")
    first = kc.compile_incore(src_dir / "k.cpp")
    assert first[:4] == b"\x7fELF" and (kc.hits, kc.misses) == (0, 1)
    assert kc.compile_incore(src_dir / "k.cpp") == first and (kc.hits, kc.misses) == (1, 1)
    # A new compiler object (a new process, in effect) hits the disk cache.
    kc2 = KernelCompiler("cpu", cache_dir=tmp_path / "cache")
    assert kc2.compile_incore(src_dir / "k.cpp") == first and kc2.hits == 1
    # Editing an included header misses; restoring it hits the old entry.
    (src_dir / "helper.h").write_text("#define VALUE 2.0f\n")
    second = kc.compile_incore(src_dir / "k.cpp")
    assert second != first and kc.misses == 2
    (src_dir / "helper.h").write_text("#define VALUE 1.0f\n")
    assert kc.compile_incore(src_dir / "k.cpp") == first and kc.misses == 2
    # Other flags are another entry.
    kc.compile_incore(src_dir / "k.cpp", extra_flags=["-DUNUSED=1"])
    assert kc.misses == 3


def test_compile_errors_carry_the_compiler_output(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text("this is not C++\n")
    kc = KernelCompiler("cpu", cache_dir=tmp_path / "cache")
    with pytest.raises(simpler_setup.CompileError, match="bad.cpp"):
        kc.compile_incore(bad)
    with pytest.raises(SimplerArgumentError, match="cannot read source"):
        kc.compile_incore(tmp_path / "missing.cpp")
    with pytest.raises(SimplerError, match="unknown runtime"):
        kc.compile_orchestration("aicpu_build_graph", SOURCES / "cases_orch.cpp")
    with pytest.raises(SimplerError, match="core_type"):
        kc.compile_incore(bad, core_type="cube")


def test_c_kernels_and_orchestrations(tmp_path):
    kc = KernelCompiler("cpu", cache_dir=tmp_path / "cache")
    assert kc.compile_incore(SOURCES / "abort.c")[:4] == b"\x7fELF"
    so = kc.compile_orchestration("host_build_graph", SOURCES / "cases_orch.cpp")
    assert b"orch_chain" in so
    inc = kc.get_orchestration_include_dirs("tensormap_and_ringbuffer")
    assert any(p.endswith("simpler") for p in inc)
    assert simpler_setup.get_orchestration_include_dirs() == inc


def test_cuda_compile_needs_nvcc(tmp_path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text('#include "kernel.h"\nSIMPLER_KERNEL_ENTRY { if (args) {} }\n')
    if shutil.which("nvcc") is None and not shutil.os.path.exists("/usr/local/cuda/bin/nvcc"):
        with pytest.raises(SimplerUnsupportedError, match="nvcc not found"):
            KernelCompiler("cuda", cache_dir=tmp_path / "c").compile_incore(src)
    else:
        cubin = KernelCompiler("cuda", cache_dir=tmp_path / "c", cuda_arch="sm_90").compile_incore(src)
        assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF image
    with pytest.raises(SimplerUnsupportedError, match="nvcc not found"):
        KernelCompiler("cuda", cache_dir=tmp_path / "c2", nvcc="/nonexistent/nvcc").compile_incore(src)


def test_platform_parsing():
    assert parse_platform("cpu") == ("cpu", 0)
    assert parse_platform("cuda:3") == ("cuda", 3)
    with pytest.raises(SimplerArgumentError, match="'a5sim' is Ascend.*supported platforms: cpu, cuda"):
        parse_platform("a5sim")
    with pytest.raises(SimplerArgumentError, match="unknown platform"):
        KernelCompiler("gpu")


def test_ascend_only_helpers_say_so():
    with pytest.raises(SimplerUnsupportedError, match="only makes sense for Ascend"):
        ensure_pto_isa_root()
    with pytest.raises(SimplerUnsupportedError, match="only makes sense for Ascend"):
        extract_text_section(b"\x7fELF")


def test_args_helpers():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    args = TaskArgsBuilder(Tensor("a", a), Tensor("b", np.zeros(3, np.int8)), Scalar("s", 1.5))
    assert args.a is a and args.tensor_names() == ["a", "b"]
    clone = args.clone()
    clone.a[0, 0] = 99
    assert a[0, 0] == 0
    with pytest.raises(ValueError, match="tensor-before-scalar"):
        args.add_tensor("c", a)
    with pytest.raises(AttributeError):
        args.missing
    t = make_chip_tensor_arg(a[:, 1:])
    assert t.shape == (2, 2) and t.strides == (3, 1) and t.dtype == DataType.FLOAT32
    assert numpy_dtype_to_datatype(np.int8) == DataType.INT8
    ns = CallableNamespace({"k": 1})
    assert ns.k == 1 and ns.keep(a) is a
    with pytest.raises(AttributeError):
        ns.nothing


def test_runtime_builder_finds_the_library():
    paths = RuntimeBuilder("cpu").get_binaries()
    assert paths["runtime"].endswith("libsimpler.so")
