"""Running the judge service under uvicorn: `Service` binds the socket, serves in a thread or in
the foreground, and stops cleanly. Localhost only unless the service has tokens."""
from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from .app import make_app
from .jobs import JobBook, ServiceLimits
from .journal import Journal

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_tokens(token_file: str | Path) -> list[str]:
    """The tokens of a token file: one per line (blank lines and `#` comments skipped), each one client."""
    tokens = [line.strip() for line in Path(token_file).read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.strip().startswith("#")]
    if not tokens:
        raise ValueError(f"the token file {token_file} holds no token")
    short = [t for t in tokens if len(t) < 16]
    if short:
        raise ValueError(f"the token file {token_file} has tokens shorter than 16 characters; make long random "
                         "ones, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return tokens


class AppServer:
    """An ASGI app under uvicorn on `host:port` (`port=0`: a free port, `.port` says which): in a
    background thread (`start()` / `stop()`) or in the foreground (`serve_forever()`). Refuses any
    host but a loopback address unless `authenticated` (the app checks tokens)."""

    def __init__(self, app: Any, *, host: str = LOOPBACK, port: int = 8765, authenticated: bool = False,
                 log_level: str = "warning"):
        import uvicorn

        if not authenticated and not is_loopback(host):
            raise ValueError(f"refusing to listen on {host} without a token: a service reachable from other "
                             "machines needs --token-file (or $CUDA_GYM_JUDGE_TOKEN); without one it binds to "
                             f"{LOOPBACK} only")
        self.app = app
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on such sockets (else 40 ms delayed-ACK stalls).
        self.socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = host, self.socket.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_keep_alive=75))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C / SIGTERM)."""
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self.closed()

    def start(self) -> "AppServer":
        """Serve in a background thread; returns once the server listens."""
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.socket]},
                                        name="cuda-gym-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving (open requests are finished first)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.socket.close()
        self.closed()

    def closed(self) -> None:
        """Called once serving has stopped."""

    def __enter__(self) -> "AppServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Service(AppServer):
    """The judge service over `evaluator`: journal in `journal_dir`, tasks `tasks` judged by id.
    Jobs still being judged at `stop()` are not waited for: a restarted service reports them lost."""

    def __init__(self, evaluator: Any, tasks: list[Task], journal_dir: str | Path, *, host: str = LOOPBACK,
                 port: int = 8765, tokens: list[str] | None = None, limits: ServiceLimits | None = None,
                 max_body_bytes: int = 8 << 20, log_level: str = "warning"):
        if not tokens and not is_loopback(host):
            super().__init__(None, host=host, authenticated=False)  # raises: no token off localhost
        self.journal = Journal(journal_dir)
        self.book = JobBook(evaluator, self.journal, tasks, limits)
        super().__init__(make_app(self.book, tokens, max_body_bytes=max_body_bytes), host=host, port=port,
                         authenticated=bool(tokens), log_level=log_level)

    def closed(self) -> None:
        self.journal.close()
