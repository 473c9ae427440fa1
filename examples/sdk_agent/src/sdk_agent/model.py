"""A scripted model for the Agents SDK: answers from the history it is given.

It never calls a network. Its reply depends only on the input the SDK
sends (the session's history plus the new message), so it proves what
history a run saw:

- a user message starting `look up ` makes it call the `lookup` tool;
- a tool result makes it answer with that result;
- anything else gets `reply N: you said '...'; before that: [...]`, N being
  how many user messages the history holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import msgspec
from agents import ModelResponse, Usage
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

__all__ = ["ScriptedModel", "user_texts"]


def user_texts(items: list[Any]) -> list[str]:
    """The texts of the user messages in `items`, oldest first."""
    texts: list[str] = []
    for item in items:
        fields = cast("dict[str, Any]", item) if isinstance(item, dict) else {}
        content = fields.get("content")
        if fields.get("role") == "user" and isinstance(content, str):
            texts.append(content)
    return texts


class ScriptedModel(Model):
    """Answers from the conversation, without a network (see the module)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """The next output for the input the SDK sends (second argument)."""
        given = kwargs.get("input", args[1] if len(args) > 1 else "")
        items: list[Any] = (
            [{"role": "user", "content": given}] if isinstance(given, str) else given
        )
        output = self._answer(items)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Streaming is not scripted: this example runs without it."""
        raise NotImplementedError("ScriptedModel does not stream")

    def _answer(self, items: list[TResponseInputItem]) -> list[TResponseOutputItem]:
        last = cast("dict[str, Any]", items[-1]) if items else {}
        users = user_texts(list(items))
        if last.get("type") == "function_call_output":
            return [_message(f"found: {last.get('output')}")]
        text = users[-1] if users else ""
        if last.get("role") == "user" and text.startswith("look up "):
            arguments = msgspec.json.encode({"topic": text[len("look up ") :]})
            return [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{len(users)}",
                    call_id=f"call_{len(users)}",
                    name="lookup",
                    arguments=arguments.decode(),
                    status="completed",
                )
            ]
        reply = f"reply {len(users)}: you said {text!r}; before that: {users[:-1]!r}"
        return [_message(reply)]


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id="msg_scripted",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
