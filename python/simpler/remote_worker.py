"""The level-4 daemon: serves remote level-3 Workers to Worker(4) parents.

    simpler-remote-worker --listen HOST:PORT --key-file PATH [--max-sessions N]
    (or: python -m simpler.remote_worker ...)

Each connection gets a fresh session process (forked here, so one session
cannot disturb another or the daemon) that authenticates the client with
the shared key before it reads a single request; see
simpler/remote/session.py. With port 0 a free port is chosen; the first
line on stdout says which: "simpler.remote_worker listening on HOST:PORT".
Session processes die with the daemon.

At most --max-sessions sessions run at once (default 8: each one is a
level-3 Worker with its own children). A connection over the limit still
gets an authenticated answer, so its parent's init() fails with a message
that says why, instead of waiting for a session that never comes.

SIGHUP re-reads the key file (key rotation): sessions already open go on
under the key they authenticated with; later connections need the new
key. A file that does not hold a valid key is refused and the old key
kept. Either way one line on stdout says what happened.
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


DEFAULT_MAX_SESSIONS = 8


def _refuse(conn: socket.socket, key: bytes, why: str) -> None:
    """The body of a forked refusing process: authenticates the client (a
    stranger learns nothing), answers its first request with `why` and
    exits."""
    code = 0
    try:
        from tensorcore import Channel

        from . import _errors
        from .remote.session import HANDSHAKE_S, _die_with_parent

        _die_with_parent()
        ch = Channel.open(conn, server=True, keys=P.keyring(key), timeout=HANDSHAKE_S)
        try:
            _, body = P.decode(ch.recv(P.MAX_FRAME_BYTES, HANDSHAKE_S), {P.CONTROL})
            rid, _, _ = P.parse_control(body)
            ch.send(P.encode(P.CONTROL_REPLY, P.reply_body(rid, _errors.DISPATCH, why)), HANDSHAKE_S)
        finally:
            ch.close()
    except BaseException:  # noqa: BLE001 - a refused peer that misbehaves is not our problem
        code = 1
    finally:
        os._exit(code)


def serve(host: str, port: int, key_file: str, key: bytes, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
    from .remote.session import serve_connection

    listener = socket.create_server((host, port), backlog=64)
    bound = listener.getsockname()[1]
    print(f"simpler.remote_worker listening on {host}:{bound}", flush=True)
    sessions: set = set()
    refusers: set = set()  # short-lived processes answering connections over the limit
    stopping = []
    reload = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGHUP, lambda *_: reload.append(1))
    try:
        while not stopping:
            if reload:
                reload.clear()
                try:
                    key = P.read_key_file(key_file)
                    print("simpler.remote_worker reloaded the key file", flush=True)
                except (OSError, ValueError, TypeError) as e:
                    print(f"simpler.remote_worker kept its key: the key file is not usable ({e})", flush=True)
            try:
                ready = select.select([listener], [], [], 0.5)[0]
            except InterruptedError:
                continue
            _reap(sessions)
            _reap(refusers)
            if not ready:
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            over = len(sessions) >= max_sessions
            if over and len(refusers) >= max_sessions:
                conn.close()  # a flood: no process per connection beyond this
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                if over:
                    _refuse(conn, key, f"the daemon at {host}:{bound} serves at most {max_sessions} sessions at "
                                       f"once and {len(sessions)} are open; try again later, or start it with a "
                                       f"higher --max-sessions")
                serve_connection(conn, key)  # never returns
            conn.close()
            (refusers if over else sessions).add(pid)
    finally:
        listener.close()
        for pid in sessions | refusers:  # they would die with us anyway (PDEATHSIG); do not leave zombies to init
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in sessions | refusers:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept sessions on (port 0: any free port)")
    ap.add_argument("--key-file", required=True, help="file holding the shared key (>= 32 bytes, mode 600); "
                                                      "SIGHUP re-reads it")
    ap.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                    help=f"sessions served at once (default {DEFAULT_MAX_SESSIONS}); more are refused with a message")
    a = ap.parse_args(argv)
    try:
        host, port = P.parse_address(a.listen)
        key = P.read_key_file(a.key_file)
        if a.max_sessions < 1:
            raise ValueError(f"--max-sessions must be at least 1, got {a.max_sessions}")
    except (OSError, ValueError, TypeError) as e:
        print(f"simpler.remote_worker: {e}", file=sys.stderr)
        return 2
    serve(host, port, a.key_file, key, a.max_sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
