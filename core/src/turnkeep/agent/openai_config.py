"""How to reach an OpenAI-compatible model server, and how hard to try.

`OpenAIConfig` is read from the environment (`OpenAIConfig.from_env`) or
built directly; `turnkeep.agent.openai_compat.OpenAIModel` uses it (and
re-exports it). Every value is checked when the configuration is built, so
a bad setting is a `ConfigurationError` before any request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError

__all__ = ["DEFAULT_BASE_URL", "OpenAIConfig"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"


def _number(name: str, value: object, *, zero: bool) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        what = "zero or more" if zero else "more than zero"
        raise ConfigurationError(
            f"OpenAIConfig.{name} must be a number of seconds, {what}, got {value!r}"
        )
    return float(value)


def _positive(
    _config: object, attribute: attrs.Attribute[float], value: object
) -> None:
    _number(attribute.name, value, zero=False)


def _not_negative(
    _config: object, attribute: attrs.Attribute[float], value: object
) -> None:
    _number(attribute.name, value, zero=True)


def _count(_config: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"OpenAIConfig.{attribute.name} must be a whole number, zero or more, "
            f"got {value!r}"
        )


@attrs.frozen
class OpenAIConfig:
    """Where and how to reach the model server.

    Attributes:
        model: the model name the server knows.
        base_url: the API root (without `/chat/completions`).
        api_key: the bearer token, or `None` for servers without auth.
            Never shown by `repr`.
        timeout: seconds to wait for the server between streamed bytes.
        temperature: sent as `temperature` when set.
        max_tokens: sent as `max_tokens` when set: the output cap a token
            budget reserves per call (`turnkeep.agent.budgets`).
        report_usage: ask the server for usage (`stream_options`); turn it
            off for a server that refuses the field.
        max_retries: further requests after a failure that may pass (HTTP
            408, 409, 429, 5xx, a broken or refused connection, a timeout,
            an error the server streamed with such a code) and before any
            part of the reply arrived; `0` never retries.
        retry_delay: seconds before the first retry when the server does
            not say (`Retry-After`); doubled for each further one, with up
            to a quarter taken off at random so clients spread out.
        retry_max_delay: the longest such backoff delay.
        retry_max_wait: the longest `Retry-After` (or `retry-after-ms`)
            honoured; a server that asks for longer gets no retry, and the
            error says what it asked.
    """

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = attrs.field(default=120.0, validator=_positive)
    temperature: float | None = None
    max_tokens: int | None = None
    report_usage: bool = True
    max_retries: int = attrs.field(default=2, validator=_count)
    retry_delay: float = attrs.field(default=0.5, validator=_not_negative)
    retry_max_delay: float = attrs.field(default=8.0, validator=_not_negative)
    retry_max_wait: float = attrs.field(default=60.0, validator=_not_negative)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAIConfig | None:
        """Read the configuration from the environment; `None` if not enabled.

        Raises:
            ConfigurationError: `TURNKEEP_OPENAI_TIMEOUT` is not a
                positive number, `TURNKEEP_OPENAI_TEMPERATURE` not a
                number, `TURNKEEP_OPENAI_MAX_TOKENS` not a positive integer,
                or `TURNKEEP_OPENAI_MAX_RETRIES` not a whole number.
        """
        env = os.environ if env is None else env
        model = env.get("TURNKEEP_OPENAI_MODEL")
        if not model:
            return None
        timeout_text = env.get("TURNKEEP_OPENAI_TIMEOUT", "120")
        try:
            timeout = float(timeout_text)
        except ValueError as exc:
            raise ConfigurationError(
                f"TURNKEEP_OPENAI_TIMEOUT must be a number of seconds, got "
                f"{timeout_text!r}"
            ) from exc
        retries = env.get("TURNKEEP_OPENAI_MAX_RETRIES", "2")
        if not retries.isdigit():
            raise ConfigurationError(
                "TURNKEEP_OPENAI_MAX_RETRIES must be a whole number, zero or "
                f"more, got {retries!r}"
            )
        temperature = env.get("TURNKEEP_OPENAI_TEMPERATURE")
        max_tokens = env.get("TURNKEEP_OPENAI_MAX_TOKENS")
        try:
            temp = None if temperature is None else float(temperature)
        except ValueError as exc:
            raise ConfigurationError(
                f"TURNKEEP_OPENAI_TEMPERATURE must be a number, got {temperature!r}"
            ) from exc
        if max_tokens is not None and not (
            max_tokens.isdigit() and int(max_tokens) > 0
        ):
            raise ConfigurationError(
                "TURNKEEP_OPENAI_MAX_TOKENS must be a positive integer, got "
                f"{max_tokens!r}"
            )
        return cls(
            model=model,
            base_url=env.get("TURNKEEP_OPENAI_BASE_URL")
            or env.get("OPENAI_BASE_URL")
            or DEFAULT_BASE_URL,
            api_key=env.get("TURNKEEP_OPENAI_API_KEY") or env.get("OPENAI_API_KEY"),
            timeout=timeout,
            temperature=temp,
            max_tokens=None if max_tokens is None else int(max_tokens),
            max_retries=int(retries),
        )
