"""Reading a model file through, with a progress bar.

The model load (tc_llama_load) is one C call that maps the file; on a cold
disk its time is the reading of the file from disk, which happens as the
mapping is first touched. read_through() reads the file once, in chunks,
before that call, so the slow part is done where a bar can follow it: the
bar measures the file entering the operating system's page cache (a file
already cached passes in a fraction of a second), not the C load after it,
which then finds every page in memory. The same pass can hash the file.

The bar is tqdm's when tqdm is installed, else one stderr line per tenth of
the file; it is shown only for files over PROGRESS_MIN_BYTES and only when
stderr is a terminal.
"""

import os
import sys

PROGRESS_MIN_BYTES = 100 * 1000 * 1000
CHUNK = 8 << 20


class _Lines:
    """The bar without tqdm: a line at each tenth of the file."""

    def __init__(self, total, label, stream):
        self.total, self.label, self.stream, self.done, self.shown = total, label, stream, 0, 0

    def update(self, n):
        self.done += n
        tenth = self.done * 10 // self.total if self.total else 10
        if tenth > self.shown:
            self.shown = tenth
            self.stream.write("%s: %3d%% (%d of %d MB)\n" % (self.label, tenth * 10, self.done // 1000000,
                                                              self.total // 1000000))
            self.stream.flush()

    def close(self):
        pass


def _bar(total, label, stream):
    try:
        from tqdm import tqdm
    except ImportError:
        return _Lines(total, label, stream)
    return tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024, file=stream, leave=False)


def show_progress(path, enabled=True, stream=None, min_bytes=PROGRESS_MIN_BYTES):
    """Whether reading `path` shows a bar: enabled, a file over min_bytes
    and a terminal on `stream` (stderr)."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return bool(enabled) and tty and os.path.getsize(path) > min_bytes


def read_through(path, label=None, progress=True, digest=None, stream=None, min_bytes=PROGRESS_MIN_BYTES):
    """Reads `path` once (into the page cache), with a bar when
    show_progress() says so; feeds every byte to `digest` (a hashlib object)
    when one is given. Returns digest. Without a bar or a digest nothing is
    read (the C load reads the file itself)."""
    stream = sys.stderr if stream is None else stream
    bar = None
    if show_progress(path, progress, stream, min_bytes):
        bar = _bar(os.path.getsize(path), label or "reading " + os.path.basename(path), stream)
    if bar is None and digest is None:
        return None
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                if digest is not None:
                    digest.update(view[:n])
                if bar is not None:
                    bar.update(n)
    finally:
        if bar is not None:
            bar.close()
    return digest
