"""RuntimeBuilder: finds (and if asked, builds) the runtime library.

The original builds per-platform runtime binaries; here the runtime is one
library, libsimpler.so, built by CMake with the CUDA executor when
TC_ENABLE_CUDA is on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from simpler import SimplerError
from simpler._errors import NOT_INITIALIZED, PIPELINE

from .platforms import parse_platform

__all__ = ["RuntimeBuilder"]


class RuntimeBuilder:
    def __init__(self, platform: str = "cpu", build_dir: str | os.PathLike | None = None, jobs: int = 2):
        self.platform, _ = parse_platform(platform)
        root = Path(__file__).resolve().parent.parent.parent
        self.source_dir = root
        self.build_dir = Path(build_dir) if build_dir else root / "build"
        self.jobs = jobs

    def library_path(self) -> Path:
        """The libsimpler.so the Python package loads."""
        from simpler._lib import library_path

        return library_path()

    def get_binaries(self) -> dict:
        """Paths of what a run needs: the runtime and the device library."""
        lib = self.library_path()
        return {"runtime": str(lib), "tensorcore": str(lib.parent / "libtensorcore.so")}

    def build(self) -> Path:
        """Configures and builds libsimpler.so in build_dir (CUDA when the
        platform is cuda). Returns the library's path."""
        if not (self.source_dir / "CMakeLists.txt").is_file():
            raise SimplerError(NOT_INITIALIZED, f"no source tree at {self.source_dir} to build from")
        cmake = shutil.which("cmake")
        if not cmake:
            raise SimplerError(NOT_INITIALIZED, "cmake not found")
        cuda = "ON" if self.platform == "cuda" else os.environ.get("TC_ENABLE_CUDA", "OFF")
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        steps = [
            [cmake, "-S", str(self.source_dir), "-B", str(self.build_dir), *gen, "-DCMAKE_BUILD_TYPE=Release",
             f"-DTC_ENABLE_CUDA={cuda}"],
            [cmake, "--build", str(self.build_dir), "--target", "simpler", "-j", str(self.jobs)],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SimplerError(PIPELINE, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        return self.build_dir / "libsimpler.so"
