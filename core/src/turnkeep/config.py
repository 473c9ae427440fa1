"""Configuration: attrs classes, structured by a cattrs converter we own.

Sources, highest precedence first:

1. arguments given in code (`load_config(overrides=...)`, CLI flags);
2. `turnkeep.toml` (top-level keys), the nearest one at or above the start
   directory;
3. the `[tool.turnkeep]` table of the nearest `pyproject.toml` that has one;
4. environment variables: `TURNKEEP_<KEY>` for top-level keys (e.g.
   `TURNKEEP_PERSISTENCE=sqlite`) and `TURNKEEP_<BACKEND>__<KEY>` for a
   backend's options (e.g. `TURNKEEP_SQLITE__PATH=/tmp/s.db`).

Unknown keys are errors, reported with where they came from. Backends declare
their own attrs config class when they register; the host structures
`[backends.<name>]` into it with the same converter.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from turnkeep.backendkit import positive
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES
from turnkeep.durations import parse_duration
from turnkeep.envshadow import warn_shadowed
from turnkeep.errors import ConfigurationError
from turnkeep.meta import FORMAT_VERSION

OLDEST_WRITTEN_FORMAT: Final = 2
"""The oldest session format new sessions may be created in (`session_format`)."""

__all__ = [
    "DEFAULT_BACKEND",
    "AgentConfig",
    "Config",
    "PluginSelection",
    "RetentionPolicy",
    "RetentionStatus",
    "ServeConfig",
    "as_config",
    "load_config",
    "make_converter",
    "parse_duration",
    "structure_config",
]

T = TypeVar("T")

PluginSelection: TypeAlias = Literal["all", "none"] | tuple[str, ...]
"""Which entry-point plugins to load: all, none, or these names."""

DEFAULT_BACKEND: Final = "jsonl"
"""The backend used when configuration names none and it is installed."""

_ENV_PREFIX: Final = "TURNKEEP_"

RetentionStatus: TypeAlias = Literal["ended", "interrupted", "any"]
"""Which sessions a retention policy removes, by their summary's status."""


@attrs.frozen
class RetentionPolicy:
    """Which stored sessions `turnkeep prune` and `turnkeep.retention` remove.

    Attributes:
        older_than: remove sessions last updated longer ago than this (a
            `timedelta`, or text such as `"30d"`; see `parse_duration`).
        status: `"ended"` (the last turn ended: summary status `idle`,
            `failed` or `closed`), `"interrupted"` (summary status
            `interrupted`), or `"any"`.
    """

    older_than: timedelta = attrs.field(converter=parse_duration)
    status: RetentionStatus = attrs.field(
        default="ended", validator=lambda _i, _a, v: _check_status(v)
    )


def _check_status(value: object) -> None:
    if value not in ("ended", "interrupted", "any"):
        raise ConfigurationError(
            f"retention status must be 'ended', 'interrupted' or 'any', got {value!r}"
        )


def _check_serve_name(_i: object, _a: object, value: str | None) -> None:
    if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", value):
        raise ConfigurationError(
            f"serve name must be 1 to 40 letters, digits, '-' or '_', got {value!r}"
        )


@attrs.frozen
class ServeConfig:
    """How `turnkeep serve` runs (`[serve]`; `TURNKEEP_SERVE__<KEY>`).

    Attributes:
        token: the bearer token writes (and, unless `open_reads`, reads)
            need; unset, writes are refused and only 127.0.0.1 is served.
            At least 22 characters (`turnkeep serve --new-token` makes
            one). Prefer the environment (`TURNKEEP_SERVE__TOKEN`) to a file.
        open_reads: serve the read endpoints and the page without a token.
        host: the address to bind; another than 127.0.0.1/::1/localhost
            needs a token and `behind_proxy`.
        port: the TCP port.
        max_page: the largest `limit` a list or events request may ask for.
        max_body: the largest request body in bytes.
        requests_per_second: the sustained request rate per client (a
            signed-in browser, the bearer token from one address, or an
            address without a credential); `burst` above it.
        burst: how many requests may come at once before the rate applies.
        streams_per_client: open SSE streams per client (as above).
        max_streams: open SSE streams in all.
        trusted_proxies: addresses or networks (`10.0.0.0/8`) of reverse
            proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` are
            believed, for per-address budgets and the cookie's `Secure`.
        name: names the sign-in cookie (`turnkeep_<name>`; default the
            port), so services on one host keep their cookies apart.
        login_lifetime: how long a browser's sign-in lasts (`"12h"`).
        recover_every: run the recovery sweep this often while the service
            runs (`"60s"`; unset: only on `POST /recover`).
        prune_every: apply the `[retention]` policy this often while the
            service runs (`"1h"`; unset: never; set, it needs a policy).
        behind_proxy: a reverse proxy in front bounds connections and slow
            requests (`docs/serve.md`); needed to bind beyond loopback.
    """

    token: str | None = None
    open_reads: bool = False
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8765, validator=positive)
    max_page: int = attrs.field(default=500, validator=positive)
    max_body: int = attrs.field(default=65536, validator=positive)
    requests_per_second: int = attrs.field(default=50, validator=positive)
    burst: int = attrs.field(default=100, validator=positive)
    streams_per_client: int = attrs.field(default=16, validator=positive)
    max_streams: int = attrs.field(default=1024, validator=positive)
    trusted_proxies: tuple[str, ...] = ()
    name: str | None = attrs.field(default=None, validator=_check_serve_name)
    login_lifetime: timedelta = attrs.field(
        default=timedelta(hours=12), converter=parse_duration
    )
    recover_every: timedelta | None = attrs.field(
        default=None, converter=lambda v: _optional_duration(v)
    )
    prune_every: timedelta | None = attrs.field(
        default=None, converter=lambda v: _optional_duration(v)
    )
    behind_proxy: bool = False


def _optional_duration(value: timedelta | str | None) -> timedelta | None:
    return None if value is None else parse_duration(value)


@attrs.frozen
class AgentConfig:
    """Defaults of the agent loop (`[agent]`; `TURNKEEP_AGENT__<KEY>`).

    Attributes:
        on_unknown: what follows a call a crash left with an unknown outcome,
            for unsafe tools that do not say (`turnkeep.agent.tools.
            unknown_policy`): `"report"` (the model is told the outcome is
            unknown and may inspect) or `"block"` (the session's next turn
            is refused until a person or program resolves the call).
    """

    on_unknown: Literal["report", "block"] = attrs.field(
        default="report", validator=lambda _i, _a, v: _check_on_unknown(v)
    )


def _check_on_unknown(value: object) -> None:
    if value not in ("report", "block"):
        raise ConfigurationError(
            f"agent on_unknown must be 'report' or 'block', got {value!r}"
        )


@attrs.frozen
class Config:
    """The host's configuration.

    Attributes:
        persistence: the backend to activate by name (`"jsonl"`, `"sqlite"`,
            `"postgres"`, `"memory"`, ...), `"none"` for no persistence, or
            unset for the default (`"jsonl"` when installed, else none).
        plugins: which `turnkeep` entry points to load.
        blocked_plugins: entry-point names never to load.
        max_event_bytes: the largest encoded event accepted at append.
        redact_secrets: replace credentials in events and metadata with
            markers before anything stores them (`turnkeep.redaction`). On
            by default; `false` stores text exactly as given.
        redact_high_entropy: also replace long random-looking tokens (off
            by default: it catches hashes and ids too).
        redact_patterns: more secrets to replace, as `name = "regex"`; the
            marker is `[REDACTED:<name>]`.
        retention: the policy `turnkeep prune` applies when given no
            flags, and a service applies through `turnkeep.retention`
            (`[retention]`: `older_than = "30d"`, `status = "ended"`).
        serve: how `turnkeep serve` runs (`[serve]`, see `ServeConfig`).
        agent: the agent loop's defaults (`[agent]`, see `AgentConfig`).
        backends: per-backend option tables, keyed by backend name.
        session_format: the format version new sessions are created in
            (default: the newest, `FORMAT_VERSION`). During a rolling
            upgrade set it to the version the oldest worker reads (2), so
            that every worker can open every session; raise it once all
            are upgraded. A session keeps the version it was created with.
    """

    persistence: str | None = None
    plugins: PluginSelection = "all"
    blocked_plugins: tuple[str, ...] = ()
    max_event_bytes: int = attrs.field(
        default=DEFAULT_MAX_EVENT_BYTES, validator=positive
    )
    redact_secrets: bool = True
    redact_high_entropy: bool = False
    redact_patterns: dict[str, str] = attrs.field(
        factory=dict[str, str], validator=lambda _i, _a, v: _check_patterns(v)
    )
    retention: RetentionPolicy | None = None
    serve: ServeConfig = ServeConfig()
    agent: AgentConfig = AgentConfig()
    backends: dict[str, dict[str, Any]] = attrs.field(factory=dict[str, dict[str, Any]])
    session_format: int = attrs.field(
        default=FORMAT_VERSION, validator=lambda _i, _a, v: _check_format(v)
    )


def _check_format(version: int) -> None:
    if not OLDEST_WRITTEN_FORMAT <= version <= FORMAT_VERSION:
        raise ValueError(
            f"session_format must be between {OLDEST_WRITTEN_FORMAT} and "
            f"{FORMAT_VERSION} (the versions this code writes), not {version}"
        )


def _check_patterns(patterns: Mapping[str, str]) -> None:
    for name, regex in patterns.items():
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(
                f"redact_patterns.{name} is not a valid regex: {exc}"
            ) from exc


def make_converter() -> cattrs.Converter:
    """Return a converter for configuration classes (unknown keys refused).

    Strings are accepted where environment variables supply them: `"true"` /
    `"false"` for booleans, comma-separated lists for tuples of strings.
    """
    conv = cattrs.Converter(forbid_extra_keys=True)

    def bool_hook(value: object, _: type) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(f"expected a boolean, got {value!r}")

    def int_hook(value: object, _: type) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            return int(value.strip().replace("_", ""))
        raise ValueError(f"expected an integer, got {value!r}")

    def str_hook(value: object, _: type) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected text, got {value!r}")
        return value

    def names_hook(value: object, _: type) -> tuple[str, ...]:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        if isinstance(value, list | tuple):
            items: list[object] = list(value)  # pyright: ignore[reportUnknownArgumentType]
            if all(isinstance(v, str) for v in items):
                return tuple(str(v) for v in items)
        raise ValueError(f"expected a list of names, got {value!r}")

    def selection_hook(value: object, _: type) -> PluginSelection:
        if value in ("all", "none"):
            return "all" if value == "all" else "none"
        return names_hook(value, tuple)

    def path_hook(value: object, _: type) -> Path:
        if not isinstance(value, str | Path):
            raise ValueError(f"expected a path, got {value!r}")
        return Path(value).expanduser()

    conv.register_structure_hook(bool, bool_hook)
    conv.register_structure_hook(int, int_hook)
    conv.register_structure_hook(str, str_hook)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], names_hook)
    conv.register_structure_hook_func(lambda t: t == PluginSelection, selection_hook)

    def duration_hook(value: object, _: type) -> timedelta:
        if not isinstance(value, str):
            raise ValueError(f'expected a duration such as "30d", got {value!r}')
        return parse_duration(value)

    conv.register_structure_hook(Path, path_hook)
    conv.register_structure_hook(timedelta, duration_hook)
    return conv


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def structure_config(
    data: Mapping[str, Any],
    cls: type[T],
    *,
    source: str,
    converter: cattrs.Converter | None = None,
) -> T:
    """Structure `data` into `cls`, rendering errors for humans.

    Raises:
        ConfigurationError: unknown keys or invalid values, each named with
            its path and `source`.
    """
    conv = converter if converter is not None else make_converter()
    try:
        return conv.structure(dict(data), cls)
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        lines = cattrs.transform_error(exc, format_exception=_describe)
        raise ConfigurationError(
            f"invalid configuration in {source}: " + "; ".join(lines)
        ) from exc
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"invalid configuration in {source}: {exc}") from exc


def as_config(value: Config | Mapping[str, Any]) -> Config:
    """`value` itself, or the `Config` a mapping of `turnkeep.toml`'s keys describes.

    Raises:
        ConfigurationError: the mapping has unknown keys or invalid values.
    """
    if isinstance(value, Config):
        return value
    return structure_config(value, Config, source="Host(config=...)")


def _describe(exc: BaseException, _type: object) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unknown key(s) {', '.join(sorted(exc.extra_fields))}"
    if isinstance(exc, KeyError):
        return "required key missing"
    return str(exc) or type(exc).__name__


def load_config(
    start: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read configuration from files, environment and overrides.

    Args:
        start: where to look for `turnkeep.toml` / `pyproject.toml` (default:
            the working directory; parents are searched too).
        env: the environment (default `os.environ`).
        overrides: highest-precedence values (same keys as the files).

    Raises:
        ConfigurationError: a file is not valid TOML, or a key or value is
            invalid (the message names the source).
    """
    start = (start or Path.cwd()).resolve()
    layers: list[tuple[str, dict[str, Any]]] = []
    environ = os.environ if env is None else env
    env_layer = _from_env(environ)
    if env_layer:
        layers.append(("environment variables", env_layer))
    pyproject = _find_upwards(start, "pyproject.toml", table=("tool", "turnkeep"))
    if pyproject is not None:
        layers.append((f"{pyproject[0]} [tool.turnkeep]", pyproject[1]))
    own = _find_upwards(start, "turnkeep.toml", table=())
    if own is not None:
        layers.append((str(own[0]), own[1]))
    warn_shadowed(environ, env_layer, layers, prefix=_ENV_PREFIX, tables=_TABLES)
    if overrides:
        layers.append(("arguments", dict(overrides)))

    merged: dict[str, Any] = {}
    converter = make_converter()
    for source, layer in layers:  # lowest precedence first
        # Validate each layer on its own so errors name their source.
        structure_config(_partial(layer), Config, source=source, converter=converter)
        for key, value in layer.items():
            if key in _TABLES and isinstance(value, dict):
                merged.setdefault(key, {}).update(value)
            elif key == "backends":
                backends: dict[str, dict[str, Any]] = merged.setdefault("backends", {})
                for name, table in value.items():
                    backends.setdefault(name, {}).update(table)
            else:
                merged[key] = value
    return structure_config(
        merged, Config, source="merged configuration", converter=converter
    )


def _partial(layer: dict[str, Any]) -> dict[str, Any]:
    # One layer may set `retention.status` and leave `older_than` to another
    # (the merged configuration is checked for it): a stand-in lets the
    # layer's own values be checked, and named with their source, on their own.
    table = layer.get("retention")
    if isinstance(table, dict) and "older_than" not in table:
        return layer | {"retention": {"older_than": "1d"} | table}
    return layer


def _find_upwards(
    start: Path, filename: str, *, table: tuple[str, ...]
) -> tuple[Path, dict[str, Any]] | None:
    for directory in (start, *start.parents):
        candidate = directory / filename
        if not candidate.is_file():
            continue
        try:
            data: dict[str, Any] = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read {candidate}: {exc}") from exc
        for key in table:
            sub = data.get(key)
            if not isinstance(sub, dict):
                data = {}
                break
            data = sub  # pyright: ignore[reportUnknownVariableType]
        if table and not data:
            continue  # a pyproject.toml without [tool.turnkeep]: keep looking
        return candidate, data
    return None


_TABLES: Final = frozenset({"retention", "serve", "agent"})
"""Tables of their own merged key by key across sources (`[retention]`)."""

_TOP_LEVEL: Final = frozenset(f.name for f in attrs.fields(Config)) - {
    "backends",
    *_TABLES,
}


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(_ENV_PREFIX):
            continue
        key = name[len(_ENV_PREFIX) :].lower()
        if "__" in key:
            backend, _, option = key.partition("__")
            if backend in _TABLES and option:
                layer.setdefault(backend, {})[option] = value
            elif backend and option:
                layer.setdefault("backends", {}).setdefault(backend, {})[option] = value
        elif key in _TOP_LEVEL:
            layer[key] = value
        elif near := difflib.get_close_matches(key, _TOP_LEVEL, n=1, cutoff=0.8):
            # Other TURNKEEP_* variables belong to other parts (the OpenAI
            # model, the test suite); one this close to a setting is a typo
            # that would otherwise be ignored in silence.
            raise ConfigurationError(
                f"environment variable {name} is not a turnkeep setting; did you "
                f"mean {_ENV_PREFIX}{near[0].upper()}?"
            )
    return layer
