"""The outcomes `reconcile_effect` answers, and the payload of `effect/resolved`.

Kept apart from `turnkeep.effects` (which combines the answers and
re-exports all of this) so that `turnkeep.events` and `turnkeep.hookspecs`
can name them without importing the hook machinery.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs
import msgspec

__all__ = [
    "Done",
    "EffectOutcome",
    "EffectResolvedData",
    "NotDone",
    "ResolvedOutcome",
    "Unknown",
    "UnknownPolicy",
    "Verdict",
    "done",
    "not_done",
    "unknown",
]

ResolvedOutcome: TypeAlias = Literal["done", "not_done"]
"""What a settled effect turned out to be."""

UnknownPolicy: TypeAlias = Literal["report", "block"]
"""What the next turn does while a call's outcome is unknown: `report` it to
the model as interrupted, or `block` (refuse turns until it is resolved)."""


class EffectResolvedData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `effect/resolved`: an unknown effect was settled.

    The event's `time` says when.

    Attributes:
        call_id: the `tool/call` settled.
        outcome: `done` or `not_done`.
        result: what the model is told the call returned (`done` only).
        by: who settled it: `reconcile_effect:<plugin>` during recovery, or
            the person or program that resolved it.
        reason: why, in their words (may be empty).
    """

    call_id: str
    outcome: ResolvedOutcome
    result: str | None = None
    by: str
    reason: str = ""


@attrs.frozen
class Done:
    """The call took effect.

    Attributes:
        result: the text the model is told the call returned.
    """

    result: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen
class NotDone:
    """The call did not take effect; the model may call it again."""


@attrs.frozen
class Unknown:
    """Whether the call took effect cannot be told.

    Attributes:
        reason: why not (shown in recovery's report), may be empty.
    """

    reason: str = ""


EffectOutcome: TypeAlias = Done | NotDone | Unknown
"""One answer of `reconcile_effect`."""


def done(result: str) -> Done:
    """The call took effect and returned `result`."""
    return Done(result)


def not_done() -> NotDone:
    """The call did not take effect."""
    return NotDone()


def unknown(reason: str = "") -> Unknown:
    """Whether the call took effect cannot be told."""
    return Unknown(reason)


@attrs.frozen
class Verdict:
    """What the reconcilers decided together for one call.

    Attributes:
        outcome: the decided outcome (`Unknown` when none could tell, or
            they disagreed).
        by: the plugin whose answer was taken (`None` for unknown).
        note: why it stayed unknown, when there is something to say.
    """

    outcome: EffectOutcome
    by: str | None = None
    note: str = ""
