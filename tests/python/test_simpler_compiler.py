"""KernelCompiler (content-addressed cache, errors), platform parsing and
the rest of simpler_setup's surface."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings

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


def _kernel(tmp_path):
    src_dir = tmp_path / "src"
    src_dir.mkdir(exist_ok=True)
    (src_dir / "k.cpp").write_text(KERNEL)
    (src_dir / "helper.h").write_text("#define VALUE 1.0f\n")
    return src_dir / "k.cpp"


def test_cache_directories_are_private_and_objects_named_by_their_hash(tmp_path):
    cache = tmp_path / "a" / "b" / "cache"
    so = KernelCompiler("cpu", cache_dir=cache).compile_incore(_kernel(tmp_path))
    for d in (tmp_path / "a", tmp_path / "a" / "b", cache, cache / "manifests", cache / "objects"):
        assert os.stat(d).st_mode & 0o777 == 0o700, d
    assert os.listdir(cache / "objects") == [hashlib.sha256(so).hexdigest() + ".so"]
    assert not [n for n in os.listdir(cache / "manifests") if not n.endswith(".json")]  # no temp files left


def test_planted_object_with_a_wrong_hash_is_not_loaded(tmp_path):
    src = _kernel(tmp_path)
    cache = tmp_path / "cache"
    good = KernelCompiler("cpu", cache_dir=cache).compile_incore(src)
    (obj,) = (cache / "objects").iterdir()
    obj.write_bytes(b"\x7fELF planted code")
    kc = KernelCompiler("cpu", cache_dir=cache)
    with pytest.warns(simpler_setup.CacheWarning, match="does not hash to its name"):
        again = kc.compile_incore(src)
    assert again == good and (kc.hits, kc.misses) == (0, 1)
    assert obj.read_bytes() == good  # the rebuild replaced it
    # A link in place of the object is not followed either.
    target = tmp_path / "elsewhere.so"
    target.write_bytes(good)
    obj.unlink()
    obj.symlink_to(target)
    kc = KernelCompiler("cpu", cache_dir=cache)
    assert kc.compile_incore(src) == good and kc.misses == 1
    assert not obj.is_symlink()


@pytest.mark.parametrize("name", ["../x.so", "ABSOLUTE", "x.so", "0" * 64 + ".txt", "0" * 64 + ".cubin",
                                  "A" * 64 + ".so", "0" * 64 + ".so/../../x.so", 17])
def test_manifest_naming_anything_but_a_hash_is_never_opened(tmp_path, name):
    src = _kernel(tmp_path)
    cache = tmp_path / "cache"
    good = KernelCompiler("cpu", cache_dir=cache).compile_incore(src)
    (manifest,) = (cache / "manifests").iterdir()
    entries = json.loads(manifest.read_text())
    planted = b"\x7fELF planted code"
    if name == "ABSOLUTE":
        name = str(tmp_path / "abs.so")
    if isinstance(name, str):
        path = name if os.path.isabs(name) else os.path.normpath(cache / "objects" / name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(planted)
    for e in entries:
        e["object"] = name
    manifest.write_text(json.dumps(entries))
    kc = KernelCompiler("cpu", cache_dir=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = kc.compile_incore(src)
    assert got == good and got != planted and (kc.hits, kc.misses) == (0, 1)
    if isinstance(name, str):
        assert any(issubclass(w.category, simpler_setup.CacheWarning) for w in caught), [str(w) for w in caught]


@pytest.mark.parametrize("text", ["not json", "{}", "[1, 2]", '[{"deps": 5, "object": "x"}]', '[{"deps": [[1]]}]'])
def test_malformed_manifests_are_misses(tmp_path, text):
    src = _kernel(tmp_path)
    cache = tmp_path / "cache"
    good = KernelCompiler("cpu", cache_dir=cache).compile_incore(src)
    (manifest,) = (cache / "manifests").iterdir()
    manifest.write_text(text)
    kc = KernelCompiler("cpu", cache_dir=cache)
    assert kc.compile_incore(src) == good and kc.misses == 1
    assert kc.compile_incore(src) == good and kc.hits == 1  # the manifest was rewritten


@pytest.mark.parametrize("where", ["", "manifests", "objects"])
def test_cache_others_may_write_into_is_refused(tmp_path, where):
    src = _kernel(tmp_path)
    cache = tmp_path / "cache"
    KernelCompiler("cpu", cache_dir=cache).compile_incore(src)
    d = cache / where if where else cache
    for mode in (0o777, 0o720, 0o702, 0o1777):
        os.chmod(d, mode)
        with pytest.raises(SimplerArgumentError, match=f"{d}.*mode.*other users may write"):
            KernelCompiler("cpu", cache_dir=cache).compile_incore(src)
    os.chmod(d, 0o755)  # readable by others is fine
    kc = KernelCompiler("cpu", cache_dir=cache)
    kc.compile_incore(src)
    assert kc.hits == 1


def test_cache_of_another_user_or_behind_a_link_is_refused(tmp_path):
    src = _kernel(tmp_path)
    real = tmp_path / "real"
    KernelCompiler("cpu", cache_dir=real).compile_incore(src)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(SimplerArgumentError, match=f"{link}.*symbolic link"):
        KernelCompiler("cpu", cache_dir=link).compile_incore(src)
    (real / "objects").rename(tmp_path / "objs")
    (real / "objects").symlink_to(tmp_path / "objs")
    with pytest.raises(SimplerArgumentError, match="objects.*symbolic link"):
        KernelCompiler("cpu", cache_dir=real).compile_incore(src)
    if os.geteuid() != 0:
        return  # only root can give a directory away
    other = tmp_path / "other"
    KernelCompiler("cpu", cache_dir=other).compile_incore(src)
    os.chown(other, 65534, 65534)
    with pytest.raises(SimplerArgumentError, match=f"{other}.*owned by uid 65534"):
        KernelCompiler("cpu", cache_dir=other).compile_incore(src)


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
