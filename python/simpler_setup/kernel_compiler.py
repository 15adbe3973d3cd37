"""KernelCompiler: builds in-core kernels and orchestrations into the bytes a
CoreCallable / ChipCallable carries, through a content-addressed cache.

    cpu   in-core kernel   g++ (gcc for .c) -> shared object exporting kernel_entry
    cuda  in-core kernel   nvcc -cubin for the GPU's architecture
    both  orchestration    g++ -> host shared object exporting the entry symbol

The include directory of the simpler headers (tensor.h, kernel.h,
pto_orchestration_api.h) is on every include path.

Cache: $SIMPLER_CACHE_DIR (default ~/.cache/simpler/kernels). An entry is
keyed by the compiler's identity, the command line and the source; its
manifest records every header the compiler read (-MMD) with the hash of its
content, so an edit to any of them misses, and identical content anywhere
hits.

What a cache hit trusts (its bytes are loaded and run): the cache directory
and its manifests/ and objects/ are created 0700 and refused unless they are
real directories owned by this user that no one else may write; an object is
named by the SHA-256 of its bytes (`<64 hex>.so` or `.cubin`), a manifest
naming anything else is ignored, and an object's bytes are hashed and
compared with its name before they are returned (a mismatch recompiles, with
a warning). Files are written through mkstemp in the same directory and
os.replace.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Iterable, Sequence

from simpler import SimplerError
from simpler._errors import INVALID_ARG, NO_DEVICE, PIPELINE, error_for

from .platforms import parse_platform

__all__ = ["KernelCompiler", "get_include_dir", "CompileError", "CacheWarning"]

_RUNTIMES = ("tensormap_and_ringbuffer", "host_build_graph")


class CompileError(SimplerError):
    """The compiler rejected a source; the message holds its output."""

    def __init__(self, message: str):
        super().__init__(PIPELINE, message)


def get_include_dir() -> Path:
    """Directory holding tensor.h, kernel.h and pto_orchestration_api.h."""
    env = os.environ.get("SIMPLER_INCLUDE_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for cand in (here / "include", here.parent.parent / "include" / "simpler"):
        if (cand / "kernel.h").is_file():
            return cand
    raise error_for(INVALID_ARG, "simpler headers not found; set SIMPLER_INCLUDE_DIR to the include/simpler directory")


def _cache_dir() -> Path:
    env = os.environ.get("SIMPLER_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "simpler" / "kernels"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_OBJECT_NAME = re.compile(r"[0-9a-f]{64}\.(so|cubin)")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class CacheWarning(UserWarning):
    """A cache entry was not trusted (and was rebuilt)."""


def _private_dir(path: Path) -> Path:
    """Creates `path` (each missing level 0700) and checks it: a real
    directory, not a symbolic link, owned by this user, not writable by group
    or others. Anything else is an error naming the path."""
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise error_for(INVALID_ARG, f"kernel cache: cannot create {d}: {e.strerror}") from None
    try:
        st = os.lstat(path)
    except OSError as e:
        raise error_for(INVALID_ARG, f"kernel cache: cannot inspect {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise error_for(INVALID_ARG, f"kernel cache directory {path} is a symbolic link; refusing it")
    if not stat.S_ISDIR(st.st_mode):
        raise error_for(INVALID_ARG, f"kernel cache directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise error_for(INVALID_ARG, f"kernel cache directory {path} is owned by uid {st.st_uid}, not by this user "
                                     f"(uid {os.geteuid()}); refusing to load code from it")
    if st.st_mode & 0o022:
        raise error_for(INVALID_ARG, f"kernel cache directory {path} has mode {stat.S_IMODE(st.st_mode):04o}: other "
                                     f"users may write into it; refusing to load code from it (chmod go-w it, or "
                                     f"set SIMPLER_CACHE_DIR to a private directory)")
    return path


def _read_nofollow(path: Path) -> bytes:
    """The bytes of a regular file, never read through a link."""
    fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def _write_atomic(directory: Path, name: str, data: bytes) -> None:
    """Writes directory/name through a fresh mkstemp file and os.replace."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _manifest_entries(raw: bytes, suffix: str, manifest: Path) -> list[dict]:
    """The well-formed entries of a manifest for objects of `suffix`; an entry
    naming any other object is dropped with a warning (never opened)."""
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(entries, list):
        return []
    good = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        name, deps = e.get("object"), e.get("deps")
        if not isinstance(name, str) or not isinstance(deps, list):
            continue
        if not _OBJECT_NAME.fullmatch(name) or not name.endswith("." + suffix):
            warnings.warn(f"kernel cache: manifest {manifest} names object {name!r}, which is not "
                          f"<sha256>.{suffix}; ignored", CacheWarning, stacklevel=4)
            continue
        if not all(isinstance(d, list) and len(d) == 2 and all(isinstance(x, str) for x in d) for d in deps):
            continue
        good.append({"deps": deps, "object": name})
    return good


def _file_sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return _sha(f.read())
    except OSError:
        return None


_identity_lock = threading.Lock()
_identities: dict[str, str] = {}


def _compiler_identity(exe: str) -> str:
    """Path and --version output of a compiler (cached per process)."""
    with _identity_lock:
        if exe not in _identities:
            try:
                out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                out = ""
            _identities[exe] = f"{shutil.which(exe) or exe}\n{out}"
        return _identities[exe]


def _parse_depfile(text: str) -> list[str]:
    """Dependencies listed by a make-style depfile (-MMD)."""
    body = text.replace("\\\n", " ")
    deps = []
    for line in body.splitlines():
        if ":" not in line:
            continue
        rhs = line.split(":", 1)[1]
        # Paths with escaped spaces keep them.
        token, escaped = "", False
        for ch in rhs:
            if escaped:
                token += ch
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch.isspace():
                if token:
                    deps.append(token)
                token = ""
            else:
                token += ch
        if token:
            deps.append(token)
    return deps


class KernelCompiler:
    """Compiles kernels and orchestrations for one platform ("cpu" or "cuda")."""

    def __init__(self, platform: str = "cpu", cache_dir: str | os.PathLike | None = None, cxx: str | None = None,
                 cc: str | None = None, nvcc: str | None = None, cuda_arch: str | None = None,
                 opt_level: str = "-O2"):
        self.platform, _ = parse_platform(platform)
        self.cache_dir = Path(cache_dir) if cache_dir else _cache_dir()
        self.cxx = cxx or os.environ.get("CXX") or "g++"
        self.cc = cc or os.environ.get("CC") or "gcc"
        self.nvcc = nvcc or os.environ.get("NVCC") or shutil.which("nvcc") or (
            "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else "nvcc")
        self._cuda_arch = cuda_arch or os.environ.get("SIMPLER_CUDA_ARCH")
        self.opt_level = opt_level
        self.hits = 0
        self.misses = 0

    # ---- public API -----------------------------------------------------------

    def get_orchestration_include_dirs(self, runtime: str = "tensormap_and_ringbuffer") -> list[str]:
        """Include directories an orchestration (and kernel) source needs."""
        if runtime not in _RUNTIMES:
            raise error_for(INVALID_ARG, f"unknown runtime '{runtime}'; supported runtimes: {', '.join(_RUNTIMES)}")
        return [str(get_include_dir())]

    def get_incore_include_dirs(self) -> list[str]:
        return [str(get_include_dir())]

    def compile_incore(self, source_path, core_type: str = "aiv", pto_isa_root=None,
                       extra_include_dirs: Iterable = (), extra_flags: Sequence[str] = ()) -> bytes:
        """Builds one in-core kernel. `core_type` ("aiv", "aic") and
        `pto_isa_root` are accepted for the original's call shape; cpu and cuda
        have one kind of core and no PTO-ISA."""
        if core_type not in ("aiv", "aic", "any"):
            raise error_for(INVALID_ARG, f"compile_incore: core_type '{core_type}' (use 'aiv', 'aic' or 'any')")
        src = Path(source_path)
        includes = [str(get_include_dir())] + [str(d) for d in extra_include_dirs]
        if self.platform == "cuda":
            return self._compile(src, self._nvcc_command(includes, extra_flags), "cubin")
        compiler = self.cc if src.suffix == ".c" else self.cxx
        std = "-std=gnu11" if src.suffix == ".c" else "-std=gnu++17"
        cmd = [compiler, std, self.opt_level, "-fPIC", "-shared", "-Wall"] + [f"-I{d}" for d in includes]
        return self._compile(src, cmd + list(extra_flags), "so")

    def compile_orchestration(self, runtime_name: str, source_path, extra_include_dirs: Iterable = (),
                              extra_flags: Sequence[str] = ()) -> bytes:
        """Builds an orchestration into a host shared object (both platforms)."""
        includes = self.get_orchestration_include_dirs(runtime_name) + [str(d) for d in extra_include_dirs]
        cmd = [self.cxx, "-std=gnu++17", self.opt_level, "-fPIC", "-shared", "-Wall"] + [f"-I{d}" for d in includes]
        return self._compile(Path(source_path), cmd + list(extra_flags), "so")

    @property
    def cuda_arch(self) -> str:
        """sm_XX of the GPU (SIMPLER_CUDA_ARCH, else nvidia-smi, else sm_90)."""
        if not self._cuda_arch:
            arch = "sm_90"
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=30).stdout.split()
                if out:
                    arch = "sm_" + out[0].replace(".", "")
            except (OSError, subprocess.SubprocessError):
                pass
            self._cuda_arch = arch
        return self._cuda_arch

    # ---- internals ------------------------------------------------------------

    def _nvcc_command(self, includes: list[str], extra_flags: Sequence[str]) -> list[str]:
        if not (shutil.which(self.nvcc) or os.path.exists(self.nvcc)):
            raise error_for(NO_DEVICE, f"compile_incore(platform='cuda'): nvcc not found ('{self.nvcc}'); install the "
                                          f"CUDA toolkit or set NVCC")
        arch = self.cuda_arch
        return [self.nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17"] + [f"-I{d}" for d in includes] + \
            list(extra_flags)

    def _compile(self, src: Path, cmd: list[str], suffix: str) -> bytes:
        try:
            source = src.read_bytes()
        except OSError as e:
            raise error_for(INVALID_ARG, f"cannot read source {src}: {e}") from None
        compiler = cmd[0]
        # The source's directory is part of the key: its quoted includes resolve there.
        base = _sha(json.dumps([_compiler_identity(compiler), cmd, suffix, str(src.resolve().parent)]).encode() +
                    b"\0" + source)
        _private_dir(self.cache_dir)
        manifests = _private_dir(self.cache_dir / "manifests")
        objects = _private_dir(self.cache_dir / "objects")
        manifest = manifests / f"{base}.json"
        # Hit: some recorded build whose headers all still hash the same, and
        # whose object's bytes still hash to its name.
        try:
            entries = _manifest_entries(_read_nofollow(manifest), suffix, manifest)
        except OSError:
            entries = []
        for entry in entries:
            if all(_file_sha(p) == h for p, h in entry["deps"]):
                obj = objects / entry["object"]
                try:
                    data = _read_nofollow(obj)
                except OSError:
                    continue
                if _sha(data) + "." + suffix != entry["object"]:
                    warnings.warn(f"kernel cache: {obj} does not hash to its name; not loaded, recompiling",
                                  CacheWarning, stacklevel=3)
                    continue
                self.hits += 1
                return data
        # Miss: compile in a private directory, then publish atomically.
        self.misses += 1
        with tempfile.TemporaryDirectory(prefix="simpler-cc-") as tmp:
            out = Path(tmp) / f"out.{suffix}"
            dep = Path(tmp) / "out.d"
            full = cmd + ["-MMD", "-MF", str(dep), "-o", str(out), str(src.resolve())]
            try:
                proc = subprocess.run(full, capture_output=True, text=True, timeout=600)
            except OSError as e:
                raise CompileError(f"cannot run {compiler}: {e}") from None
            if proc.returncode != 0:
                raise CompileError(f"compiling {src} failed ({' '.join(full)}):\n{proc.stderr.strip()}")
            data = out.read_bytes()
            deps = []
            if dep.exists():
                for p in _parse_depfile(dep.read_text()):
                    if os.path.abspath(p) == str(src.resolve()):
                        continue
                    h = _file_sha(p)
                    if h is not None:
                        deps.append([os.path.abspath(p), h])
        obj_name = f"{_sha(data)}.{suffix}"
        _write_atomic(objects, obj_name, data)
        deps = sorted(deps)
        entries = [e for e in entries if e["deps"] != deps] + [{"deps": deps, "object": obj_name}]
        _write_atomic(manifests, manifest.name, json.dumps(entries[-8:]).encode())
        return data
