"""Plan item 29's workload: 50 canary secrets placed everywhere a turn writes.

Shared by the per-backend canary tests: builds the canaries (seeded), runs
turns through the agent loop with `redact_secrets = true`, and lists what
must never appear raw in any stored byte.
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from typing import Any

from turnkeep import AgentLoop, Host, ToolContext, function_tool
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

KINDS = (
    "aws",
    "pem",
    "jwt",
    "sk",
    "ghp",
    "bearer",
    "url-password",
    "entropy",
)


def _random(rnd: random.Random, alphabet: str, n: int) -> str:
    return "".join(rnd.choice(alphabet) for _ in range(n))


def canary(kind: str, rnd: random.Random) -> tuple[str, str]:
    """Return (text containing the secret, the secret part that must not leak)."""
    upper_digits = string.ascii_uppercase + string.digits
    mixed = string.ascii_letters + string.digits
    if kind == "aws":
        secret = "AKIA" + _random(rnd, upper_digits, 16)
        return secret, secret
    if kind == "pem":
        body = _random(rnd, mixed, 48)
        pem = f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----"
        return pem, body
    if kind == "jwt":
        sig = _random(rnd, mixed, 43)
        return f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{_random(rnd, mixed, 12)}.{sig}", sig
    if kind == "sk":
        secret = "sk-" + _random(rnd, mixed, 40)
        return secret, secret
    if kind == "ghp":
        secret = "ghp_" + _random(rnd, mixed, 36)
        return secret, secret
    if kind == "bearer":
        token = _random(rnd, mixed, 32)
        return f"Authorization: Bearer {token}", token
    if kind == "url-password":
        password = "pw" + _random(rnd, mixed, 14)
        return f"https://deploy:{password}@example.com/hook", password
    token = (
        _random(rnd, string.ascii_uppercase, 10)
        + _random(rnd, string.digits, 10)
        + _random(rnd, string.ascii_lowercase, 20)
    )
    token = "".join(rnd.sample(token, len(token)))
    return token, token


def canaries(seed: int, count: int = 50) -> list[tuple[str, str]]:
    """`count` canaries, every kind represented."""
    rnd = random.Random(seed)
    return [canary(KINDS[i % len(KINDS)], rnd) for i in range(count)]


async def run_canary_turns(host: Host, secrets: list[tuple[str, str]]) -> str:
    """Drive turns whose every part carries canaries; return the session id."""
    texts = [text for text, _ in secrets]
    groups = [texts[i : i + 5] for i in range(0, len(texts), 5)]

    @function_tool(replay="safe")
    async def deploy(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Echo a secret back, then fail with another in the error."""
        if arguments.get("fail"):
            raise RuntimeError(f"deploy failed with {arguments['token']}")
        return f"deployed using {arguments['token']}"

    replies: list[Reply] = []
    for group in groups:
        replies.append(
            Reply(
                f"I will use {group[1]}",
                (
                    ScriptedCall("deploy", {"token": group[2]}),
                    ScriptedCall("deploy", {"token": group[3], "fail": True}),
                ),
            )
        )
        replies.append(Reply(f"done; remember {group[4]}"))
    model = ScriptedModel(replies)
    loop = AgentLoop.create("canary", host=host, model=model, tools=[deploy])
    session = host.sessions.get(loop.session_id)
    session.set_summary(title=f"deploy {groups[0][0]}", first_prompt=groups[0][0])
    for group in groups:
        await loop.run_turn(f"use this key: {group[0]}")
    await loop.close()
    return loop.session_id
