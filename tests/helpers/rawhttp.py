"""Servers that answer HTTP requests with raw bytes, for clients facing answers that are not HTTP."""

import re
import socket
import threading


def read_request(connection):
    """Read one whole request, body included.

    A socket closed with unread bytes in its buffer sends a reset instead of an end of stream, and the client then
    sees "connection reset" rather than the answer under test; one recv() may also return only part of a request.
    """
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            return
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    declared = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(declared.group(1)) if declared else 0
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            return
        body += chunk


def answering(*answers, forever=False):
    """A local TCP server that reads each request whole and answers with `answers` in turn (the last one for ever
    with `forever`), then closes the connection. Return the listening socket; close it to stop the server."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        index = 0
        while forever or index < len(answers):
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                read_request(connection)
                connection.sendall(answers[min(index, len(answers) - 1)])
            index += 1
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener
