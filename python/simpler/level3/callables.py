"""Registered callables of a level-3 Worker: ChipCallables (run by chip
children) and Python callables (sub-tasks, or orchestration functions run
in the parent). Both are identified by a content digest, so registering the
same content twice gives the same handle."""

from __future__ import annotations

import hashlib
import marshal
import pickle

from ..task_interface import ChipCallable

MAX_CALLABLES = 64


def python_digest(fn) -> str:
    """SHA-256 over the function's identity and content: module, qualified
    name, bytecode, defaults and closure values (by repr)."""
    h = hashlib.sha256()
    h.update(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}".encode())
    code = getattr(fn, "__code__", None)
    if code is not None:
        h.update(marshal.dumps(code))
        h.update(repr(getattr(fn, "__defaults__", None)).encode())
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                h.update(repr(cell.cell_contents).encode())
            except ValueError:  # an empty cell
                h.update(b"<empty>")
    else:
        h.update(repr(fn).encode())
    return h.hexdigest()


def pickle_callable(fn):
    """The bytes a child unpickles, or None when fn cannot travel (a lambda
    or a local function without cloudpickle): such a callable must be
    registered before init(), when the children inherit it."""
    try:
        import cloudpickle  # optional: ships lambdas and closures by value

        return cloudpickle.dumps(fn)
    except ImportError:
        pass
    except Exception:
        return None
    try:
        data = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:
        return None


class Entry:
    __slots__ = ("slot", "kind", "target", "digest", "workers", "payload", "_sig", "access", "label")

    def __init__(self, slot, kind, target, digest, workers):
        self.slot = slot
        self.kind = kind  # "chip" or "py"
        self.target = target
        self.digest = digest
        self.workers = workers  # ids it was sent to (None = all of its role)
        self.payload = None  # post-init: True once shipped, False when it cannot be pickled
        self._sig = None
        self.access = None  # a chip callable's tensor directions (bytes), once a task needed them
        self.label = None  # how messages name its tasks


class Registry:
    def __init__(self):
        self.entries: dict = {}
        self.by_digest: dict = {}

    def add(self, target, workers):
        """(entry, new)"""
        if isinstance(target, ChipCallable):
            kind, digest = "chip", "chip:" + target.digest
        elif callable(target):
            kind, digest = "py", "py:" + python_digest(target)
        else:
            raise TypeError(f"register: expected a ChipCallable or a Python callable, got {type(target).__name__}")
        if digest in self.by_digest:
            return self.entries[self.by_digest[digest]], False
        slot = next((i for i in range(MAX_CALLABLES) if i not in self.entries), None)
        if slot is None:
            raise ValueError(f"register: at most {MAX_CALLABLES} callables")
        e = Entry(slot, kind, target, digest, workers)
        self.entries[slot] = e
        self.by_digest[digest] = slot
        return e, True

    def get(self, handle, kind: str | None = None) -> Entry:
        e = self.entries.get(handle)  # an int handle as it is (per task: no int() call)
        if e is None:
            e = self.entries.get(int(handle))
        if e is None:
            raise ValueError(f"callable handle {int(handle)} is not registered")
        if kind is not None and e.kind != kind:
            want = "a ChipCallable" if kind == "chip" else "a Python callable"
            raise TypeError(f"callable handle {int(handle)} is not {want}")
        return e

    def remove(self, slot: int) -> Entry:
        e = self.entries.pop(slot, None)
        if e is None:
            raise ValueError(f"unregister: slot {slot} is not registered")
        del self.by_digest[e.digest]
        return e

    def for_role(self, role: str, index: int) -> dict:
        """slot -> target that a child of `role` inherits at fork."""
        kind = "chip" if role == "chip" else "py"
        return {s: e.target for s, e in self.entries.items()
                if e.kind == kind and (e.workers is None or index in e.workers)}
