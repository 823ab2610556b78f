"""The launcher's port check: TIME_WAIT left by a stopped API is free, a live listener is not."""

from __future__ import annotations

import socket

from services.launcher import port_free


def _listener() -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    return srv


def _plain_bind_fails(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def test_a_live_listener_is_in_use() -> None:
    srv = _listener()
    try:
        assert not port_free("127.0.0.1", srv.getsockname()[1])
    finally:
        srv.close()


def test_time_wait_after_a_stop_is_free() -> None:
    srv = _listener()
    port = srv.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    # the server closes first, as a stopping API does: its side of the connection stays in TIME_WAIT
    conn.close()
    client.recv(1)
    client.close()
    srv.close()
    assert _plain_bind_fails(port), "the test did not leave a TIME_WAIT connection on the port"
    assert port_free("127.0.0.1", port)
