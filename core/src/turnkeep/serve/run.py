"""Running the service: the bind rule, then uvicorn.

The service binds 127.0.0.1 unless told otherwise, and refuses to bind any
other address without a token: an open service is for this machine only.
It refuses to start with a token too weak to resist guessing.
"""

from __future__ import annotations

import ipaddress

import uvicorn

from turnkeep.config import ServeConfig
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host
from turnkeep.serve.app import create_app
from turnkeep.serve.tokens import check_token

__all__ = ["check_bind", "is_loopback", "serve"]


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP or `localhost`) is this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def check_bind(config: ServeConfig) -> None:
    """Refuse a weak token, and a non-loopback bind without a token.

    Raises:
        ConfigurationError: the token is too weak to resist guessing
            (`turnkeep.serve.tokens.check_token`), or `config.host` is not
            loopback and no token is set.
    """
    check_token(config.token)
    if not is_loopback(config.host) and not config.token:
        raise ConfigurationError(
            f"refusing to serve on {config.host}, which is not loopback, without a "
            "token; set TURNKEEP_SERVE__TOKEN (or [serve] token) or bind 127.0.0.1"
        )


async def serve(host: Host, config: ServeConfig | None = None) -> None:
    """Serve `host`'s sessions until interrupted (uvicorn, one process).

    Raises:
        ConfigurationError: see `check_bind`.
    """
    config = config if config is not None else host.config.serve
    check_bind(config)
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
    await server.serve()
