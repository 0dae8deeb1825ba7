"""Binding before serving: a Unix socket's file is made with its mode, a stale one is replaced, a
live one or a non-socket is refused, and closing removes only the file we made; TCP problems are
one-line errors."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from pipeline.flag_checks import UsageError
from pipeline.listen_socket import MAX_UDS_PATH_BYTES, bind_tcp, bind_uds


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_socket_file_gets_its_mode_and_group_and_goes_with_close(tmp_path):
    path = str(tmp_path / "a.sock")
    listener = bind_uds(path)
    assert stat.S_ISSOCK(os.stat(path).st_mode) and mode_of(path) == 0o600
    listener.close()
    assert not os.path.exists(path)
    listener = bind_uds(path, 0o660, str(os.getgid()))
    assert mode_of(path) == 0o660 and os.stat(path).st_gid == os.getgid()
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)  # listening
    listener.close()


def test_a_stale_socket_file_is_replaced(tmp_path):
    path = str(tmp_path / "stale.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()  # its file stays: nobody answers on it
    listener = bind_uds(path)
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
    listener.close()


def test_a_live_socket_and_a_plain_file_are_refused_and_left_as_they_are(tmp_path):
    path = str(tmp_path / "live.sock")
    live = bind_uds(path)
    with pytest.raises(UsageError, match="another server is listening on it"):
        bind_uds(path)
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)  # the first one still answers there
    live.close()
    plain = tmp_path / "plain"
    plain.write_text("data")
    with pytest.raises(UsageError, match="exists and is not a socket"):
        bind_uds(str(plain))
    assert plain.read_text() == "data"


def test_close_leaves_a_file_another_server_made(tmp_path):
    path = str(tmp_path / "taken.sock")
    first = bind_uds(path)
    first.sockets[0].close()
    os.unlink(path)
    second = bind_uds(path)  # another server's file at the same path now
    first.close()
    assert os.path.exists(path)
    second.close()
    assert not os.path.exists(path)


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="^--uds /nonexistent/dir/x.sock: the directory /nonexistent/dir does not"):
        bind_uds("/nonexistent/dir/x.sock")
    long_path = str(tmp_path / ("x" * MAX_UDS_PATH_BYTES))
    with pytest.raises(UsageError, match="longer than a Unix socket path may be"):
        bind_uds(long_path)
    with pytest.raises(UsageError, match="^--uds-group no-such-group-for-ttft: no such group$"):
        bind_uds(str(tmp_path / "g.sock"), 0o660, "no-such-group-for-ttft")
    assert not list(tmp_path.glob("*.sock"))


def test_tcp_binds_a_free_port_and_refuses_a_busy_one():
    listener = bind_tcp("127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    assert port > 0 and listener.url == f"http://127.0.0.1:{port}"
    with pytest.raises(UsageError, match=f"^--port {port}: 127.0.0.1:{port} is in use"):
        bind_tcp("127.0.0.1", port)
    listener.close()
    again = bind_tcp("127.0.0.1", port, "https")  # free again once closed
    assert again.url == f"https://127.0.0.1:{port}"
    again.close()
