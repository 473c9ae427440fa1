"""The payloads of the commit manifest: versions of outside state, and their drift.

A turn's `turn/end` may name the versions of the outside state it leaves
behind (`TurnEndData.manifest`: name -> version, from the `turn_manifest`
hook); a completed turn's is the ready commit. When a continued session
finds the world at other versions, the difference is a `ManifestDifference`
per name, and a `run/drift` event (`RunDriftData`) records it when the
caller accepts it, or when the session's own unfinished turn explains it.
Kept apart from `turnkeep.events` (which names the events and re-exports
these) so the vocabulary module stays one screenful per idea.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

__all__ = ["Manifest", "ManifestDifference", "RunDriftData"]

Manifest: TypeAlias = dict[str, str]
"""Versions of outside state by name (`{"workspace": "sha256:..."}`)."""


class ManifestDifference(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """One name whose version in the world is not the one last committed.

    Attributes:
        name: the name, as the `turn_manifest` implementation gave it.
        recorded: its version in the last committed manifest (`None`: the
            manifest did not name it).
        current: its version in the world now (`None`: no implementation
            names it any more).
        explained_by: the seq of the `turn/end` of this session's own turn
            that did not complete (failed, cancelled, interrupted ...) after
            that commit and left the name at `current`: the difference is
            that turn's doing. `None`: nothing in the log explains it.
    """

    name: str
    recorded: str | None
    current: str | None
    explained_by: int | None = None

    def describe(self) -> str:
        """The difference in words (`workspace: recorded sha256:ab…, now ...`)."""
        if self.recorded is None:
            text = f"{self.name}: not recorded, now {self.current}"
        elif self.current is None:
            text = f"{self.name}: recorded {self.recorded}, now not named"
        else:
            text = f"{self.name}: recorded {self.recorded}, now {self.current}"
        if self.explained_by is not None:
            text += (
                f" (left so by the unfinished turn ending at seq {self.explained_by})"
            )
        return text


class RunDriftData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `run/drift`: a resume found the world changed and went on.

    Attributes:
        since_seq: seq of the event whose manifest the world was compared
            with (the ready commit: a completed turn's `turn/end`, or an
            earlier `run/drift`).
        differences: each name that differs, by name; one this session's
            own unfinished turn explains names that turn's `turn/end`.
        manifest: the world's versions when the session was resumed; the
            manifest later resumes compare with until a turn ends.
    """

    since_seq: int
    differences: list[ManifestDifference]
    manifest: Manifest
