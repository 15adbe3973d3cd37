"""The level-4 daemon: serves remote level-3 Workers to Worker(4) parents.

    python -m simpler.remote_worker --listen HOST:PORT --key-file PATH

Each connection gets a fresh session process (forked here, so one session
cannot disturb another or the daemon) that authenticates the client with
the shared key before it reads a single request; see
simpler/remote/session.py. With port 0 a free port is chosen; the first
line on stdout says which: "simpler.remote_worker listening on HOST:PORT".
Session processes die with the daemon.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys

from .remote import protocol as P


def _reap(sessions: set) -> None:
    for pid in list(sessions):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            sessions.discard(pid)


def serve(host: str, port: int, key: bytes) -> None:
    from .remote.session import serve_connection

    listener = socket.create_server((host, port), backlog=64)
    bound = listener.getsockname()[1]
    print(f"simpler.remote_worker listening on {host}:{bound}", flush=True)
    sessions: set = set()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        while not stopping:
            try:
                ready = select.select([listener], [], [], 0.5)[0]
            except InterruptedError:
                continue
            _reap(sessions)
            if not ready:
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                serve_connection(conn, key)  # never returns
            conn.close()
            sessions.add(pid)
    finally:
        listener.close()
        for pid in sessions:  # they would die with us anyway (PDEATHSIG); do not leave zombies to init
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in sessions:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simpler.remote_worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept sessions on (port 0: any free port)")
    ap.add_argument("--key-file", required=True, help="file holding the shared key (>= 32 bytes, mode 600)")
    a = ap.parse_args(argv)
    try:
        host, port = P.parse_address(a.listen)
        key = P.read_key_file(a.key_file)
    except (OSError, ValueError, TypeError) as e:
        print(f"simpler.remote_worker: {e}", file=sys.stderr)
        return 2
    serve(host, port, key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
