"""The binding against the C headers, for every area at once: each TC_
constant has the header's value, each TC_API function is declared with the
header's parameter count, and each C struct has a ctypes mirror with the
compiler's size and field offsets. Skipped where the headers (or a C
compiler) are not available, e.g. against an installed package."""

import ctypes
import re
import shutil
import subprocess

import pytest

import tensorcore as tc
from conftest import REPO

HEADERS = sorted((REPO / "include" / "tensorcore").glob("*.h"))
pytestmark = pytest.mark.skipif(not HEADERS, reason="C headers not found")


def header_text():
    text = "\n".join(h.read_text() for h in HEADERS)
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # drop comments


def header_constants():
    out = {}
    for name, expr in re.findall(r"^#define\s+(TC_[A-Z0-9_]+)\s+(.+)$", header_text(), flags=re.M):
        expr = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)(?:[uU]?[lL]{0,2}|[lL]{1,2}[uU])\b", r"\1", expr.strip())
        if re.fullmatch(r"[0-9a-fA-Fx()<>+\-|&~ ]+", expr):
            out[name] = eval(expr)  # digits and operators only
    return out


def header_functions():
    flat = re.sub(r"\s+", " ", header_text())
    out = {}
    for name, params in re.findall(r"TC_API [^;(]*?\b(tc_\w+)\s*\(([^)]*)\)\s*;", flat):
        params = params.strip()
        out[name] = 0 if params in ("", "void") else params.count(",") + 1
    return out


def test_every_header_constant_has_its_value():
    consts = header_constants()
    assert len(consts) >= 36
    missing = sorted(n for n in consts if not hasattr(tc, n))
    assert not missing, "constants not in the binding: %s" % missing
    wrong = {n: (getattr(tc, n), v) for n, v in consts.items() if getattr(tc, n) != v}
    assert not wrong, "binding value != header value: %s" % wrong


def test_every_header_function_is_declared():
    funcs = header_functions()
    assert "tc_gemm_async" in funcs and funcs["tc_gemm_async"] == 6
    missing = sorted(n for n in funcs if n not in tc._lib.DECLARED)
    assert not missing, "functions without a prototype in the binding: %s" % missing
    for name, nparams in funcs.items():
        fn = tc._lib.DECLARED[name]
        assert hasattr(tc._lib.lib, name), "%s is declared but the library lacks it" % name
        assert len(fn.argtypes) == nparams, "%s: %d argtypes, header has %d" % (name, len(fn.argtypes), nparams)


def exported_structs():
    return {cls._c_name_: cls for cls in (getattr(tc, n) for n in dir(tc))
            if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and hasattr(cls, "_c_name_")}


def test_every_header_struct_has_a_mirror():
    names = {"struct " + n for n in re.findall(r"\bstruct\s+(tc_\w+)\s*\{", header_text())}
    assert "struct tc_gemm_desc" in names
    missing = sorted(names - set(exported_structs()))
    assert not missing, "C structs without a ctypes mirror: %s" % missing


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_struct_layouts_match_the_compiler(tmp_path):
    structs = exported_structs()
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "tensorcore/tensorcore.h"', 'int main(void) {']
    for cname, cls in structs.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, *_ in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, field, cname, field))
    lines.append("return 0; }")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines))
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c11", "-I", str(REPO / "include"), str(src), "-o", str(exe)], check=True)
    c_layout = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    for cname, cls in structs.items():
        assert int(c_layout[cname]) == ctypes.sizeof(cls), "%s: sizeof differs" % cname
        for field, _ in cls._fields_:
            offset = _field_offset(cls, field)
            assert int(c_layout["%s.%s" % (cname, field)]) == offset, "%s.%s: offset differs" % (cname, field)


def _field_offset(cls, field):
    """ctypes' offset of `field` (str-decoded fields hide the descriptor, so lay out _fields_ afresh)."""
    probe = type("Probe", (ctypes.Structure,), {"_fields_": cls._fields_})
    return getattr(probe, field).offset


def test_area_modules_are_all_exported_without_clashes():
    import importlib
    import pkgutil

    import tensorcore._api as api

    seen = {}
    for mod_info in pkgutil.iter_modules(api.__path__):
        mod = importlib.import_module("tensorcore._api." + mod_info.name)
        assert hasattr(mod, "__all__"), "%s has no __all__" % mod.__name__
        for name in mod.__all__:
            assert name not in seen, "%s exported by both %s and %s" % (name, seen[name], mod.__name__)
            seen[name] = mod.__name__
            assert getattr(tc, name, None) is getattr(mod, name), \
                "tc.%s is not %s.%s: add `from ._api.%s import *` to tensorcore/__init__.py" % (
                    name, mod.__name__, name, mod_info.name)


def _exported_functions(lib_path):
    import shutil
    import subprocess
    if not shutil.which("nm"):
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib_path)], capture_output=True, text=True, check=True)
    return [line.split()[2] for line in out.stdout.splitlines() if len(line.split()) == 3 and line.split()[1] == "T"]


def test_library_exports_only_its_c_abi():
    """Internal functions, and copies of C++ runtime code from static archives,
    must not be exported: a loaded library would interpose them on others."""
    extra = [s for s in _exported_functions(tc.library_path) if not s.startswith("tc_")]
    assert not extra, "libtensorcore exports non-ABI functions: %s" % extra[:10]


def test_runtime_library_exports_only_its_c_abi():
    from pathlib import Path
    lib = Path(tc.library_path).with_name("libsimpler.so")
    if not lib.exists():
        pytest.skip("libsimpler.so is not built beside libtensorcore.so")
    extra = [s for s in _exported_functions(lib) if not s.startswith("simpler_")]
    assert not extra, "libsimpler exports non-ABI functions: %s" % extra[:10]
