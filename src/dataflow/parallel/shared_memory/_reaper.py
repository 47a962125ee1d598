"""The clean-up process of one pipeline's shared-memory segments (run as a script).

:class:`dataflow.parallel.shared_memory.SegmentSpace` starts it as
``python -S -I _reaper.py <listener fd> <owner fd> <shm dir> <prefix>``; it imports the
standard library only. Every process that may create segments named ``<prefix>-*`` holds a
connection to it: the consumer (the owner, through a socket pair) and each process that writes
a segment (it connects to the listening socket, an abstract unix socket named
``<prefix>-reaper``, before its first segment and waits for the byte ``k``).

The kernel closes a process's connections when the process ends, however it ends (SIGKILL
included), so the reaper learns of every death at once:

* the owner's connection closed: the consumer is gone (or closed the pipeline). Nobody will
  open the segments still in ``<shm dir>`` any more: they are removed, and no new writer is
  accepted (the listening socket is closed; a writer waiting for its ``k`` gets an EOF and sends
  its buffers through the socket instead);
* every connection closed: nobody can create a segment any more; what the last writers created
  meanwhile is removed, and the reaper exits.

It ignores SIGINT and SIGHUP (and runs in a session of its own, so a Ctrl-C in the terminal
does not reach it): it ends only when its work is done, or when it is killed.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys

#: what the reaper sends a writer that it accepted
ACCEPTED = b"k"


def sweep(shm_dir: str, prefix: str) -> int:
    """Remove the segments ``<prefix>-*`` of ``shm_dir``; return how many."""
    start = prefix + "-"
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0
    n = 0
    for name in names:
        if name.startswith(start):
            try:
                os.unlink(os.path.join(shm_dir, name))
                n += 1
            except OSError:
                pass
    return n


def serve(listener: socket.socket, owner: socket.socket, shm_dir: str, prefix: str) -> None:
    """Accept writers until the owner leaves; sweep then, and again once everyone left."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(owner, selectors.EVENT_READ)
    holders = {owner}
    accepting = True
    while holders:
        for key, _ in sel.select():
            sock = key.fileobj
            if accepting and sock is listener:
                try:
                    conn, _ = listener.accept()
                    conn.sendall(ACCEPTED)
                except OSError:
                    continue
                sel.register(conn, selectors.EVENT_READ)
                holders.add(conn)
                continue
            if sock not in holders:
                continue
            try:
                data = sock.recv(64)
            except OSError:
                data = b""
            if data:
                continue  # nobody sends anything after connecting: ignore it
            sel.unregister(sock)
            holders.discard(sock)
            sock.close()
            if sock is owner:
                accepting = False
                sel.unregister(listener)
                listener.close()
                sweep(shm_dir, prefix)
    sweep(shm_dir, prefix)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    listener_fd, owner_fd, shm_dir, prefix = argv
    listener = socket.socket(fileno=int(listener_fd))
    owner = socket.socket(fileno=int(owner_fd))
    serve(listener, owner, shm_dir, prefix)


if __name__ == "__main__":
    main(sys.argv[1:])
