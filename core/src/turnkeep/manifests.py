"""The commit manifest: which versions of outside state a turn leaves behind.

A turn acts on state outside the log (a workspace, a database, a ticket):
plugins name its versions through the `turn_manifest` hook, and the agent
loop records them in each `turn/end` (`TurnEndData.manifest`). Used by the
host (`Host.turn_manifest`) and the agent loop (`turnkeep.agent.manifest`):

- `gather` asks every implementation and merges the answers by name;
- `last_manifest` finds the manifest a log last committed: the latest
  `turn/end` that names one, or a later `run/drift` (a resume that accepted
  a changed world, whose versions are then the ones to compare with);
- `differences` says, name by name, where the world and that manifest part.

Every name on either side counts: a name the world no longer gives (its
plugin gone, its state removed) differs as much as a new version does, and
so does a name the manifest never held. A process in which no plugin names
anything checks nothing: it cannot see the state.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from turnkeep._pluggy import call_impl
from turnkeep.errors import ManifestHookError
from turnkeep.events import (
    Manifest,
    ManifestDifference,
    RunDrift,
    SessionEvent,
    TurnEnd,
)

if TYPE_CHECKING:
    from pluggy import HookImpl

    from turnkeep.session import Session

__all__ = ["differences", "gather", "incomplete_name", "last_manifest"]

_log: Final = logging.getLogger("turnkeep")
_GAP_TEXT: Final = 300
"""The most of a failed plugin's error a manifest keeps."""


def incomplete_name(plugin: str) -> str:
    """The name under which a manifest says `plugin` could not answer."""
    return f"turnkeep.incomplete:{plugin}"


async def gather(
    impls: Sequence[HookImpl], session: Session, *, strict: bool
) -> Manifest | None:
    """Ask every `turn_manifest` implementation; merge the answers by name.

    Returns:
        The merged manifest, or `None` when no implementation named anything.

    Raises:
        ManifestHookError: with `strict`, an implementation raised, answered
            something that is not a mapping of text to text, or gave a name
            another one gave with another version. Without `strict` each such
            failure is logged, that implementation's answer left out, and
            the manifest names the gap (`incomplete_name(plugin)`, the error
            as its version), so that a later check compares with this
            manifest (and says it was incomplete) rather than with an older
            one the turn may have moved past.
    """
    merged: Manifest = {}
    owners: dict[str, str] = {}
    for impl in reversed(impls):  # pluggy keeps them last-called first
        plugin = impl.plugin_name
        try:
            answer = await _ask(impl, session)
            for name, version in answer.items():
                other = owners.get(name)
                if other is not None and merged[name] != version:
                    raise ManifestHookError(
                        session.id,
                        plugin,
                        f"it gives {name!r} version {version!r}, plugin {other!r} "
                        f"gives {merged[name]!r}",
                    )
        except ManifestHookError as exc:
            if strict:
                raise
            _log.warning("%s; this turn/end leaves its names out", exc)
            merged[incomplete_name(plugin)] = str(exc)[:_GAP_TEXT]
            continue
        for name, version in answer.items():
            merged[name] = version
            owners.setdefault(name, plugin)
    return merged or None


async def _ask(impl: HookImpl, session: Session) -> Mapping[str, str]:
    plugin = impl.plugin_name
    try:
        answer = call_impl(impl, session=session)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        raise ManifestHookError(
            session.id, plugin, f"{type(exc).__name__}: {exc}"
        ) from exc
    if answer is None:
        return {}
    if not isinstance(answer, Mapping):
        raise ManifestHookError(
            session.id, plugin, f"answered {type(answer).__name__}, not a mapping"
        )
    out: dict[str, str] = {}
    for name, version in answer.items():  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(name, str) or not name or not isinstance(version, str):
            raise ManifestHookError(
                session.id,
                plugin,
                f"answered {name!r}: {version!r}; names and versions must be "
                "text (names non-empty)",
            )
        out[name] = version
    return out


def last_manifest(events: Sequence[SessionEvent]) -> tuple[int, Manifest] | None:
    """The manifest `events` last committed, with the seq of its event.

    The latest `turn/end` that names a manifest, or `run/drift` after it
    (`None`: the log names none). Reads from the end back to that event.
    """
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, TurnEnd):
            manifest = event.data.manifest
            if isinstance(manifest, dict):
                return event.seq, manifest
        elif isinstance(event, RunDrift):
            return event.seq, event.data.manifest
    return None


def differences(
    recorded: Mapping[str, str], current: Mapping[str, str]
) -> list[ManifestDifference]:
    """Each name whose version differs, by name (none: `[]`)."""
    return [
        ManifestDifference(
            name=name, recorded=recorded.get(name), current=current.get(name)
        )
        for name in sorted(recorded.keys() | current.keys())
        if recorded.get(name) != current.get(name)
    ]
