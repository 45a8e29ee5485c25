"""A tracking server as a local process: a free port on 127.0.0.1, up once its /health answers, and its whole
process group ended with the block (uvicorn's workers with it). Used by `scripts/mlflow_screenshots.py` (a server over
a copy of a store) and the tests (`mlflow/server.sh`, the deployable)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running(argv: list[str], url: str, log_path: Path, cwd: Path, env: dict[str, str],
            timeout_s: float = 180) -> Iterator[subprocess.Popen]:
    """`argv` started in a process group of its own, its output in `log_path`, until the block ends (also on error);
    the block starts once `url`/health answers. A server that exits or does not answer in time raises RuntimeError
    with the last line of its log."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout_s
            while not healthy(url):
                if proc.poll() is not None:
                    tail = Path(log_path).read_text()[-1500:].strip().splitlines()
                    raise RuntimeError(f"the server exited ({proc.returncode}): {tail[-1] if tail else ''}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not answer {url}/health in {timeout_s:.0f} s")
                time.sleep(0.5)
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
