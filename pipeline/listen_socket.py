"""The listening sockets of `ttft serve`, bound before the model loads and handed to uvicorn.

Binding first turns every address problem into a one-line `UsageError` before anything starts
(uvicorn would find it only after the lifespan began loading the weights). For a Unix socket
(`--uds`, the sidecar) this module also owns the file's life, which uvicorn and asyncio handle
unsafely: asyncio removes whatever socket file is at the path, so a second server silently took
over a live one's path, and uvicorn made the file `0666`. Here:

- a path a live server answers on is refused; a stale socket file (nobody answers) is replaced;
  a path that is not a socket is refused;
- the file is created with `--uds-mode` (default 0600: only this user can connect), optionally
  owned by `--uds-group` so that its members can connect with a mode like 0660; `listen()` comes
  after the mode is set, so no connection is accepted under a wider one;
- the file is removed when the server ends, unless another server has replaced it meanwhile.
"""
from __future__ import annotations

import errno
import grp
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.flag_checks import UsageError

BACKLOG = 2048  # uvicorn's default
MAX_UDS_PATH_BYTES = 107  # sun_path holds 108 bytes with the terminating NUL (Linux)


@dataclass
class Listener:
    sockets: list[socket.socket]
    url: str  # where clients reach it, for the log
    uds_path: str | None = None
    _uds_identity: tuple[int, int] | None = field(default=None, repr=False)  # (st_dev, st_ino) we created

    def close(self) -> None:
        """Close the sockets and remove the socket file if it is still the one we created: the same
        inode (a file made after ours was removed may reuse its number, so also) that nobody
        answers on."""
        for sock in self.sockets:
            sock.close()
        if self.uds_path is None or self._uds_identity is None:
            return
        try:
            st = os.stat(self.uds_path)
            if (st.st_dev, st.st_ino) == self._uds_identity and not answers(self.uds_path):
                os.unlink(self.uds_path)
        except OSError:
            pass  # gone already, or not ours to judge: leave it


def bind_tcp(host: str, port: int, scheme: str = "http") -> Listener:
    """Sockets on every address `host` resolves to (as asyncio's create_server binds them)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot be resolved ({exc.strerror})") from None
    addresses = list(dict.fromkeys(infos))
    if port == 0:
        addresses = addresses[:1]  # a free port is another number on each address: listen on one
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise UsageError(_tcp_error(host, port, exc)) from None
    bound = sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return Listener(sockets, f"{scheme}://{shown}:{bound}")


def _tcp_error(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"--port {port}: {host}:{port} is in use (another server is listening there)"
    if exc.errno == errno.EACCES:
        return f"--port {port}: permission denied (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine"
    return f"--host {host} --port {port}: cannot listen ({exc.strerror or exc})"


def bind_uds(path: str, mode: int = 0o600, group: str | None = None) -> Listener:
    """A listening Unix socket at `path` with permission bits `mode` (and `group` as its group)."""
    check_uds_path(path)
    gid = _group_id(group)
    remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o777 & ~mode)  # the file is born with no more than `mode`
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"--uds {path}: another server took this path meanwhile") from None
        raise UsageError(f"--uds {path}: cannot create the socket ({exc.strerror or exc})") from None
    finally:
        os.umask(old_umask)
    try:
        os.chmod(path, mode)
        if gid is not None:
            os.chown(path, -1, gid)
        st = os.stat(path)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        os.unlink(path)
        raise UsageError(f"--uds {path}: cannot set its owner or mode ({exc.strerror or exc})") from None
    return Listener([sock], f"unix:{path}", path, (st.st_dev, st.st_ino))


def check_uds_path(path: str) -> None:
    if len(os.fsencode(path)) > MAX_UDS_PATH_BYTES:
        raise UsageError(f"--uds {path}: longer than a Unix socket path may be ({MAX_UDS_PATH_BYTES} bytes)")
    parent = Path(path).parent
    if not parent.is_dir():
        raise UsageError(f"--uds {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--uds {path}: no permission to create a file in {parent}")


def answers(path: str) -> bool:
    """Whether a server accepts connections on the Unix socket at `path` (busy counts as yes).
    OSError when that cannot be told (no permission to connect)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:
        return True  # alive, its backlog full
    finally:
        probe.close()
    return True


def remove_stale_socket(path: str) -> None:
    """Remove a socket file nobody answers on; refuse a live one, or a path that is no socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise UsageError(f"--uds {path}: exists and is not a socket (remove it or choose another path)")
    try:
        live = answers(path)
    except OSError as exc:
        raise UsageError(f"--uds {path}: a socket file this user cannot connect to ({exc.strerror or exc}); "
                         "remove it or choose another path") from None
    if live:
        raise UsageError(f"--uds {path}: another server is listening on it (stop it, or choose another path)")
    os.unlink(path)  # stale: its server is gone


def _group_id(group: str | None) -> int | None:
    if group is None:
        return None
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise UsageError(f"--uds-group {group}: no such group") from None
