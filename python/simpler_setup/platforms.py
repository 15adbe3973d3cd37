"""Platform names: "cpu", "cuda" or "cuda:N". The original's Ascend platforms
(a2a3, a5 and their simulators) are named in the error, not accepted."""

from __future__ import annotations

from simpler import SimplerArgumentError
from simpler._errors import INVALID_ARG

SUPPORTED_PLATFORMS = ("cpu", "cuda")
ASCEND_PLATFORMS = ("a2a3", "a5", "a2a3sim", "a5sim")

__all__ = ["parse_platform", "SUPPORTED_PLATFORMS", "available_platforms"]


def parse_platform(platform: str) -> tuple[str, int]:
    """("cpu", 0) | ("cuda", device_id); raises for anything else."""
    if not isinstance(platform, str):
        raise SimplerArgumentError(INVALID_ARG, f"platform must be a string, got {platform!r}")
    p = platform.strip().lower()
    if p == "cpu":
        return "cpu", 0
    if p == "cuda":
        return "cuda", 0
    if p.startswith("cuda:") and p[5:].isdigit():
        return "cuda", int(p[5:])
    if p in ASCEND_PLATFORMS:
        raise SimplerArgumentError(
            INVALID_ARG, f"platform '{platform}' is Ascend hardware (or its simulator), which this runtime does not "
                         f"drive; supported platforms: {', '.join(SUPPORTED_PLATFORMS)}")
    raise SimplerArgumentError(INVALID_ARG,
                               f"unknown platform '{platform}'; supported platforms: {', '.join(SUPPORTED_PLATFORMS)}")


_available = None


def available_platforms() -> list[str]:
    """Platforms this process can run on: cpu always; cuda when the library
    was built with it and a GPU answers."""
    global _available
    if _available is None:
        plats = ["cpu"]
        try:
            from simpler._lib import version

            if "cuda" in version():
                from simpler import Worker

                w = Worker(2, platform="cuda")
                try:
                    w.init()
                    plats.append("cuda")
                finally:
                    w.close()
        except Exception:
            pass
        _available = plats
    return list(_available)
