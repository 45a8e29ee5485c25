"""Messages between the judge and a runner: length-prefixed JSON over a Unix socket, file
descriptors attached with SCM_RIGHTS. The runner's answers steer the conversation only: no time is ever
taken from them, and a failure they report reads only as one a runner may have (runners.claimed_failure). Each
message the judge sends carries a number (`turn`) that its one answer repeats: an answer out of turn is a runner
that tampered with the protocol (runners.RunnerHandle.receive)."""

from __future__ import annotations

import json
import socket
import struct
import time

MAX_FDS = 64
_HEADER = struct.Struct("<I")


class ChannelClosed(ConnectionError):
    """The other side is gone (it exited, crashed or was killed)."""


class ChannelTimeout(TimeoutError):
    """No message within the deadline."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._pending = b""
        self._fds: list[int] = []

    def send(self, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
        body = json.dumps(message).encode()
        data = _HEADER.pack(len(body)) + body
        try:
            if fds:
                socket.send_fds(self.sock, [data[:_HEADER.size]], list(fds))
                self.sock.sendall(data[_HEADER.size:])
            else:
                self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ChannelClosed(f"the other side is gone ({exc})") from None

    def _fill(self, deadline: float | None) -> None:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout("no message in time")
            self.sock.settimeout(remaining)
        else:
            self.sock.settimeout(None)
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, MAX_FDS)
        except TimeoutError:
            raise ChannelTimeout("no message in time") from None
        except (ConnectionResetError, OSError) as exc:
            raise ChannelClosed(f"the other side is gone ({exc})") from None
        if not data:
            for fd in fds:
                _close(fd)
            raise ChannelClosed("the other side closed the connection")
        self._pending += data
        self._fds.extend(fds)

    def recv(self, timeout_s: float | None = None) -> tuple[dict, list[int]]:
        """The next message and the file descriptors that came with it."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(self._pending) < _HEADER.size:
            self._fill(deadline)
        (length,) = _HEADER.unpack(self._pending[:_HEADER.size])
        while len(self._pending) < _HEADER.size + length:
            self._fill(deadline)
        body = self._pending[_HEADER.size:_HEADER.size + length]
        self._pending = self._pending[_HEADER.size + length:]
        fds, self._fds = self._fds, []
        return json.loads(body), fds

    def close(self) -> None:
        for fd in self._fds:
            _close(fd)
        self._fds = []
        self.sock.close()


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
