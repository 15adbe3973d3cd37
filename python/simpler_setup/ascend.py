"""Entry points of the original that only make sense for Ascend hardware."""

from __future__ import annotations

from simpler import SimplerUnsupportedError
from simpler._errors import UNSUPPORTED

__all__ = ["ensure_pto_isa_root", "extract_text_section"]


def ensure_pto_isa_root(*args, **kwargs):
    """The original clones the PTO-ISA headers for Ascend kernels; cpu and cuda
    kernels need none."""
    raise SimplerUnsupportedError(
        UNSUPPORTED, "ensure_pto_isa_root: PTO-ISA only makes sense for Ascend hardware; on cpu and cuda, "
                     "KernelCompiler needs no pto_isa_root")


def extract_text_section(binary, *args, **kwargs):
    """The original strips an Ascend kernel object to its .text; cpu kernels
    are whole shared objects and cuda kernels cubins."""
    raise SimplerUnsupportedError(
        UNSUPPORTED, "extract_text_section: only makes sense for Ascend hardware kernels; pass the bytes "
                     "KernelCompiler.compile_incore returns to CoreCallable.build unchanged")
