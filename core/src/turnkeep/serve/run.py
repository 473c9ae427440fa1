"""Running the service: the bind rule, the listening socket, then uvicorn.

The service binds 127.0.0.1 unless told otherwise, and refuses to bind any
other address without a token: an open service is for this machine only.
It refuses to start with a token too weak to resist guessing. uvicorn has
no deadline for receiving a request (its keep-alive timer restarts on
every byte) and the service no bound on open connections, so any other
address also needs `behind_proxy`: the operator's word that a reverse
proxy in front bounds both. The socket
is bound before uvicorn starts, so a busy port is an `OSError`
the caller can report (uvicorn alone logs it and exits the process).
"""

from __future__ import annotations

import ipaddress
import socket

import uvicorn

from turnkeep.config import ServeConfig
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host
from turnkeep.serve.app import create_app
from turnkeep.serve.tokens import check_token

__all__ = ["check_bind", "is_loopback", "listen", "serve", "url"]


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP or `localhost`) is this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def check_bind(config: ServeConfig) -> None:
    """Refuse a weak token, and a non-loopback bind without a token or a proxy.

    Raises:
        ConfigurationError: the token is too weak to resist guessing
            (`turnkeep.serve.tokens.check_token`), or `config.host` is not
            loopback and no token is set, or it is not loopback and
            `behind_proxy` is not set.
    """
    check_token(config.token)
    if is_loopback(config.host):
        return
    if not config.token:
        raise ConfigurationError(
            f"refusing to serve on {config.host}, which is not loopback, without a "
            "token; set TURNKEEP_SERVE__TOKEN (or [serve] token) or bind 127.0.0.1"
        )
    if not config.behind_proxy:
        raise ConfigurationError(
            f"refusing to serve on {config.host}, which is not loopback, without a "
            "reverse proxy in front: the service bounds neither how many "
            "connections stay open nor how slowly a request arrives, so clients "
            "that send their headers slowly can hold it until it runs out of file "
            "descriptors. Put a proxy in front that bounds both (docs/serve.md, "
            "'What the proxy must enforce') and pass --behind-proxy ([serve] "
            "behind_proxy = true), or bind 127.0.0.1"
        )


def url(config: ServeConfig) -> str:
    """The service's address as a URL (an IPv6 address in brackets)."""
    name = config.host
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return f"http://{name}:{config.port}/"


def listen(config: ServeConfig) -> socket.socket:
    """A socket bound to `config`'s address (its first resolved one).

    Raises:
        ConfigurationError: see `check_bind`.
        OSError: the address cannot be bound (the port is in use, the
            address is not this machine's, the name does not resolve).
    """
    check_bind(config)
    found = socket.getaddrinfo(
        config.host.strip("[]"),
        config.port,
        type=socket.SOCK_STREAM,
        flags=socket.AI_PASSIVE,
    )
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restarted service may bind a port whose old
        # connections linger in TIME_WAIT (a live listener still refuses it).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(
    host: Host, config: ServeConfig | None = None, sock: socket.socket | None = None
) -> None:
    """Serve `host`'s sessions until interrupted (uvicorn, one process).

    Args:
        host: a started host.
        config: the service's settings (default: the host's `[serve]`).
        sock: a socket from `listen(config)`; bound here if not given.

    Raises:
        ConfigurationError: see `check_bind`.
        OSError: see `listen`.
    """
    config = config if config is not None else host.config.serve
    check_bind(config)
    if sock is None:
        sock = listen(config)
    app = create_app(host, config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            server_header=False,
            proxy_headers=False,
            lifespan="on",
        )
    )
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
