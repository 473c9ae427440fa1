"""`turnkeep serve` binds before it says "serving": a busy port is one line.

The socket is bound before uvicorn starts, so an address that cannot be
bound (a port in use, an address not on this machine) ends the command
with one line and exit status 3 (`docs/cli.md`), and "serving ..." is
printed only once the address is held. The URL it prints puts an IPv6
address in brackets.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import attrs
import pytest
from tests.cli.support import cli, one_line_error

from turnkeep.cli.serve import EXIT_BIND
from turnkeep.config import ServeConfig
from turnkeep.serve.run import listen, url


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_busy_port_is_one_line_and_exit_3(busy_port: int) -> None:
    result = cli("--store", "memory", "serve", "--port", str(busy_port))
    assert result.exit_code == EXIT_BIND == 3
    line = one_line_error(result)
    assert f"cannot serve on 127.0.0.1 port {busy_port}: the port is in use" in line
    assert "--port" in line
    assert "serving" not in result.stderr


def test_an_address_not_on_this_machine_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURNKEEP_SERVE__TOKEN", "a-token-for-a-public-address")
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never this machine's address.
    result = cli("--store", "memory", "serve", "--host", "192.0.2.1", "--behind-proxy")
    assert result.exit_code == EXIT_BIND
    assert "cannot serve on 192.0.2.1 port 8765" in one_line_error(result)
    assert "serving" not in result.stderr


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "http://127.0.0.1:8765/"),
        ("localhost", "http://localhost:8765/"),
        ("::1", "http://[::1]:8765/"),
        ("[::1]", "http://[::1]:8765/"),
    ],
)
def test_the_printed_url_brackets_an_ipv6_address(host: str, expected: str) -> None:
    assert url(attrs.evolve(ServeConfig(), host=host)) == expected


def test_listen_binds_an_ipv6_loopback_address() -> None:
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = int(probe.getsockname()[1])
    with listen(attrs.evolve(ServeConfig(), host="::1", port=port)) as sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockname()[0] == "::1"
