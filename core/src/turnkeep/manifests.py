"""The commit manifest: which versions of outside state a turn leaves behind.

A turn acts on state outside the log (a workspace, a database, a ticket):
plugins name its versions through the `turn_manifest` hook, and the agent
loop records them in each `turn/end` (`TurnEndData.manifest`). Used by the
host (`Host.turn_manifest`) and the agent loop (`turnkeep.agent.manifest`):

- `gather` asks every implementation and merges the answers by name;
- `last_manifest` finds the ready commit: the manifest of the latest
  *completed* turn's `turn/end`, or a later `run/drift` (a continuation that
  accepted a changed world, whose versions are then the ones to compare
  with). A failed, cancelled or interrupted turn records what it observed
  in its own `turn/end`, but never becomes the baseline;
- `unfinished_after` finds the latest such turn after the ready commit;
- `differences` says, name by name, where the world and that manifest part,
  and which differences that unfinished turn explains (it left the world so);
- `drift_from` puts them together into the `run/drift` a continuation
  records (`None`: nothing differs, or nothing to compare with);
- `needs_reconciling` says whether a live session's last turn ended
  unfinished with nothing recorded since (a warm continuation checks then).

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
    RunDriftData,
    SessionEvent,
    TurnEnd,
    TurnStart,
)

if TYPE_CHECKING:
    from pluggy import HookImpl

    from turnkeep.session import Session

__all__ = [
    "differences",
    "drift_from",
    "gather",
    "incomplete_name",
    "last_manifest",
    "needs_reconciling",
    "unfinished_after",
]

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
    """The ready commit of `events`: the manifest to compare the world with.

    The latest `turn/end` of a completed turn that names a manifest, or a
    `run/drift` after it, with the seq of its event (`None`: the log names
    none). A turn that failed, was cancelled, interrupted or stopped by a
    budget never moves it. Reads from the end back to that event.
    """
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, TurnEnd):
            manifest = event.data.manifest
            if event.data.status == "completed" and isinstance(manifest, dict):
                return event.seq, manifest
        elif isinstance(event, RunDrift):
            return event.seq, event.data.manifest
    return None


def unfinished_after(
    events: Sequence[SessionEvent], since: int
) -> tuple[int, Manifest] | None:
    """The latest turn after seq `since` that ended unfinished, naming a manifest.

    Returns its `turn/end`'s seq and the manifest it recorded (what the world
    was when it stopped), or `None`.
    """
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.seq <= since:
            break
        if isinstance(event, TurnEnd) and event.data.status != "completed":
            manifest = event.data.manifest
            if isinstance(manifest, dict):
                return event.seq, manifest
    return None


def differences(
    recorded: Mapping[str, str],
    current: Mapping[str, str],
    unfinished: tuple[int, Manifest] | None = None,
) -> list[ManifestDifference]:
    """Each name whose version differs, by name (none: `[]`).

    With `unfinished` (a turn/end's seq and the manifest it recorded), a
    difference whose current version is the one that turn left names it as
    its explanation (`explained_by`).
    """
    found: list[ManifestDifference] = []
    for name in sorted(recorded.keys() | current.keys()):
        was, now = recorded.get(name), current.get(name)
        if was == now:
            continue
        by = None
        if unfinished is not None and unfinished[1].get(name) == now:
            by = unfinished[0]
        found.append(
            ManifestDifference(name=name, recorded=was, current=now, explained_by=by)
        )
    return found


def drift_from(
    events: Sequence[SessionEvent], current: Manifest
) -> RunDriftData | None:
    """The `run/drift` that continuing `events` in a world at `current` records.

    `None` when the log names no ready commit or the world is at it.
    """
    last = last_manifest(events)
    if last is None:
        return None
    since, recorded = last
    found = differences(recorded, current, unfinished_after(events, since))
    if not found:
        return None
    return RunDriftData(since_seq=since, differences=found, manifest=current)


def needs_reconciling(events: Sequence[SessionEvent]) -> bool:
    """Whether the last turn ended unfinished, naming a manifest, and nothing since.

    Reads back to the last `turn/end`, `turn/start` or `run/drift`.
    """
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, TurnEnd):
            return event.data.status != "completed" and isinstance(
                event.data.manifest, dict
            )
        if isinstance(event, RunDrift | TurnStart):
            return False
    return False
