"""Who is asking: the client's address and scheme, through trusted proxies.

Behind a reverse proxy every request comes from the proxy's address, so
per-address budgets would be one budget for everyone and the service could
not tell that the browser spoke TLS to the proxy. The proxies named in
`[serve] trusted_proxies` (addresses or networks) are believed:
`X-Forwarded-For` names the client (the right-most address that is not a
trusted proxy) and `X-Forwarded-Proto` the scheme. From anyone else those
headers are ignored, since any client can send them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import attrs
from starlette.requests import Request

from turnkeep.errors import ConfigurationError

__all__ = ["Clients", "parse_networks"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(specs: Iterable[str]) -> tuple[Network, ...]:
    """`10.0.0.1`, `10.0.0.0/8`, `::1` as networks.

    Raises:
        ConfigurationError: one of `specs` is no address or network.
    """
    networks: list[Network] = []
    for spec in specs:
        try:
            networks.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError:
            raise ConfigurationError(
                f"[serve] trusted_proxies: {spec!r} is neither an IP address nor "
                "a network (such as 10.0.0.0/8)"
            ) from None
    return tuple(networks)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


@attrs.frozen
class Clients:
    """Tells a request's client address and scheme."""

    trusted: tuple[Network, ...] = ()

    def _trusts(self, address: str) -> bool:
        ip = _ip(address)
        return ip is not None and any(ip in net for net in self.trusted)

    def _peer(self, request: Request) -> str:
        return request.client.host if request.client is not None else "?"

    def address(self, request: Request) -> str:
        """The client's address: the peer, or the one its trusted proxies name."""
        peer = self._peer(request)
        if not self._trusts(peer):
            return peer
        hops = [
            h.strip()
            for value in request.headers.getlist("x-forwarded-for")
            for h in value.split(",")
            if h.strip()
        ]
        for hop in reversed(hops):
            if _ip(hop) is None:
                return peer  # a hop that is no address: believe nothing further
            if not self._trusts(hop):
                return hop
        return hops[0] if hops else peer

    def is_https(self, request: Request) -> bool:
        """Whether the browser's request came over TLS (directly or to a proxy)."""
        if request.url.scheme in ("https", "wss"):
            return True
        if not self._trusts(self._peer(request)):
            return False
        proto = request.headers.get("x-forwarded-proto", "")
        return proto.rpartition(",")[2].strip().lower() == "https"
