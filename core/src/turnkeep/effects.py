"""Effects whose outcome is unknown: the typed answers and who settles them.

An `unsafe` tool call that a crash cut off has no result, and nobody can
tell from the log whether it took effect. During recovery the host asks the
plugins that implement `reconcile_effect` to look at the world and answer
with one of the outcomes here: `done(result)` (it took effect; `result` is
what the model is told it returned), `not_done()` (it did not; the model may
call it again), or `unknown()` (cannot tell). `None` means "not mine".

Precedence, when several plugins answer (`decide`): every implementation is
asked, in hook order (last registered first; `tryfirst`/`trylast` as
usual). `None` and `unknown` abstain. If the definite answers agree, the
first of them in hook order is recorded (its result, its plugin's name); if
one says done and another not done, the outcome stays unknown: a wrong
answer either way would lose an effect or repeat it. An implementation that
raises, or returns anything else, fails recovery with
`EffectReconcileError` before anything is appended.

The types live in `turnkeep.effectdata` and are re-exported here, with
`EffectResolvedData`, the payload of the `effect/resolved` event that
records a settlement (by recovery, or later by a person or program).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnkeep._pluggy import call_impl
from turnkeep.effectdata import (
    Done,
    EffectOutcome,
    EffectResolvedData,
    NotDone,
    ResolvedOutcome,
    Unknown,
    Verdict,
    done,
    not_done,
    unknown,
)
from turnkeep.errors import EffectReconcileError

if TYPE_CHECKING:
    from pluggy import HookImpl

    from turnkeep.events import ToolCall
    from turnkeep.session import Session

__all__ = [
    "Done",
    "EffectOutcome",
    "EffectResolvedData",
    "NotDone",
    "ResolvedOutcome",
    "Unknown",
    "Verdict",
    "decide",
    "done",
    "not_done",
    "unknown",
]


async def decide(
    impls: Sequence[HookImpl], session: Session, call: ToolCall
) -> Verdict:
    """Ask every `reconcile_effect` implementation about `call`; combine answers.

    Raises:
        EffectReconcileError: an implementation raised or answered something
            that is not an outcome (nothing was appended).
    """
    answers: list[tuple[str, Done | NotDone]] = []
    reasons: list[str] = []
    for impl in reversed(impls):  # pluggy keeps them last-called first
        name = impl.plugin_name
        try:
            answer = call_impl(impl, session=session, call=call)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            raise EffectReconcileError(
                session.id, call.data.call_id, name, f"{type(exc).__name__}: {exc}"
            ) from exc
        if answer is None:
            continue
        if isinstance(answer, Unknown):
            if answer.reason:
                reasons.append(f"{name}: {answer.reason}")
            continue
        if not isinstance(answer, Done | NotDone):
            raise EffectReconcileError(
                session.id,
                call.data.call_id,
                name,
                f"answered {type(answer).__name__}, not done(...), not_done() "
                "or unknown()",
            )
        answers.append((name, answer))
    if not answers:
        return Verdict(Unknown(), note="; ".join(reasons))
    kinds = {type(a) for _, a in answers}
    if len(kinds) > 1:
        said = ", ".join(
            f"{n} says {'done' if isinstance(a, Done) else 'not done'}"
            for n, a in answers
        )
        return Verdict(Unknown(), note=f"the reconcilers disagree ({said})")
    name, answer = answers[0]
    return Verdict(answer, by=name)
