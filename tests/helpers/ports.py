"""Loopback ports held for a server that starts later, or for none at all.

A port found free by binding to port 0 and let go at once is anybody's again: another socket (another
pytest-xdist worker's test server, or its own probe) may be given it before the server meant for it binds it,
seconds later (Ralph and PostgreSQL take that long to start), which then fails to start; and a test meant to
find nothing listening there may find someone else's server. A socket bound to the port and kept open, never
listening, holds it instead: the kernel gives that port to no other bind to port 0 (nor to an outgoing
connection) and refuses connections to it, while a server that binds it with SO_REUSEADDR, as PostgreSQL and
uvicorn do, can still listen there.
"""

import contextlib
import socket


def held_port():
    """Return a socket bound to a free loopback port, never listening, that a server setting SO_REUSEADDR may
    bind too; its port is `.getsockname()[1]`. Close it once that server is gone."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    return holder


@contextlib.contextmanager
def unused_port():
    """Yield a loopback port where nothing listens, and nothing can start to, until the block ends."""
    with socket.socket() as holder:  # without SO_REUSEADDR: no other socket may bind it at all
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]
