"""Starting the server: its token, its socket (bound before anything is printed, so a port in use is a one-line
error rather than a log after the address was announced), the hosts it answers for, and uvicorn."""

from __future__ import annotations

import errno
import ipaddress
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.web.served import ServedRuns

LOCAL_NAMES = ["127.0.0.1", "localhost", "::1"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); BadInput when it is taken or the host is not here."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name: resolved below
        family = socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BadInput(f"port {port} on {host} is in use: choose another with --port (0: any free port)") from None
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def allowed_hosts(host: str) -> list[str] | None:
    """The Host headers answered: on a loopback address only the loopback names (a page of another site that made
    its own name point at 127.0.0.1 cannot read the runs); on any other address, any name (the token guards actions)."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return [*LOCAL_NAMES, host] if loopback else None


@dataclass
class Server:
    """One `evokernel serve`: what it shows, where, and its token (new every start)."""

    served: ServedRuns
    host: str = "127.0.0.1"
    port: int = 8765
    bank_dir: Path | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        self.sock = bind(self.host, self.port)
        self.port = self.sock.getsockname()[1]
        import uvicorn

        from evokernel.web.app import make_app

        app = make_app(self.served, self.token, self.bank_dir, allowed_hosts(self.host))
        self.uvicorn = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                     timeout_graceful_shutdown=2))

    @property
    def url(self) -> str:
        """The page's address with the token (in the fragment: the browser never sends it in a request line)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        start = f"runs/{self.served.only}" if self.served.only else ""
        return f"http://{host}:{self.port}/{start}#token={self.token}"

    def run(self) -> None:
        """Serve until stopped (Ctrl-C, or `stop()` from another thread)."""
        try:
            self.uvicorn.run(sockets=[self.sock])
        except KeyboardInterrupt:  # uvicorn stops on Ctrl-C, then raises it again for the caller: a normal end here
            pass
        finally:
            self.sock.close()

    def stop(self) -> None:
        self.uvicorn.should_exit = True
