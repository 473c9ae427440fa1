"""Replies and faults for LiteLLM's proxy, through its `CustomLLM` hook.

Loaded by the proxy the test suite starts (`config.yaml` beside it), never
imported by the tests. The last user message names what to do (a word, then
`:` and a tag that keeps tests apart); each request is appended as one line
to the file `FAULTS_LOG` names, so a test counts the requests it caused.

- `tools`: a tool call `look` whose arguments arrive in three pieces, then
  (once the tool's result is in the history) the text `All done.`;
- `cut`: two text deltas, then an exception: the proxy sends the error
  inside the HTTP 200 stream and closes it without `[DONE]`;
- `rate-limited`: LiteLLM's `RateLimitError` (HTTP 429), every time;
- `unavailable-once`: `ServiceUnavailableError` (HTTP 503) on the tag's
  first request, a reply after;
- `bad-request`: `BadRequestError` (HTTP 400);
- `slow`: waits 30 s before its first delta;
- anything else: the text `echo: ` and the message.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
from litellm.exceptions import (
    BadRequestError,
    RateLimitError,
    ServiceUnavailableError,
)
from litellm.llms.custom_llm import CustomLLM

_seen: dict[str, int] = {}


def _piece(
    text: str = "", *, tool: dict[str, Any] | None = None, end: str | None = None
) -> dict[str, Any]:
    return {
        "text": text,
        "tool_use": tool,
        "is_finished": end is not None,
        "finish_reason": end or "",
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if end
        else None,
        "index": 0,
    }


def _tool(arguments: str, *, first: bool) -> dict[str, Any]:
    return {
        "id": "provider_call_1" if first else None,
        "type": "function",
        "function": {"name": "look" if first else None, "arguments": arguments},
        "index": 0,
    }


def _response(status: int) -> httpx.Response:
    return httpx.Response(
        status, request=httpx.Request("POST", "http://faults.invalid")
    )


class Faults(CustomLLM):
    # LiteLLM declares it a coroutine returning an iterator, and iterates
    # what it returns: an async generator is what it calls.
    async def astreaming(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        messages = kwargs.get("messages") or []
        last = messages[-1] if messages else {}
        users = [m for m in messages if m.get("role") == "user"]
        said = str(users[-1].get("content", "")) if users else ""
        word = said.partition(":")[0]
        log = os.environ.get("FAULTS_LOG")
        if log:
            # A short append of one line; the proxy serves one test at a time.
            with open(log, "a", encoding="utf-8") as file:  # noqa: ASYNC230
                file.write(said + "\n")
        _seen[said] = _seen.get(said, 0) + 1
        if word == "tools":
            if last.get("role") == "tool":
                yield _piece("All ")
                yield _piece("done.", end="stop")
                return
            yield _piece("Let me look.")
            yield _piece(tool=_tool('{"pa', first=True))
            yield _piece(tool=_tool('th": "a.', first=False))
            yield _piece(tool=_tool('txt"}', first=False))
            yield _piece(end="tool_calls")
            return
        if word == "cut":
            yield _piece("partial ")
            yield _piece("reply")
            raise RuntimeError("the upstream model broke off")
        if word == "rate-limited":
            raise RateLimitError(
                "slow down",
                llm_provider="faults",
                model="scripted",
                response=_response(429),
            )
        if word == "unavailable-once" and _seen[said] == 1:
            raise ServiceUnavailableError(
                "busy", llm_provider="faults", model="scripted", response=_response(503)
            )
        if word == "bad-request":
            raise BadRequestError(
                "no such thing", model="scripted", llm_provider="faults"
            )
        if word == "slow":
            await asyncio.sleep(30)
        yield _piece("echo: ")
        yield _piece(said, end="stop")


handler = Faults()
