"""``data.few_shot``: the worked exchanges shown before every prompt.

An entry is a question and its answer (``{user, assistant}``), or a whole exchange as chat
messages (``{messages: [...]}``), which is how a tool call is shown: the user's question, the
assistant's call, the tool's answer, the assistant's final answer. A small model imitates an
exchange it is shown far more reliably than one it is told about
(docs/experiments/smollm2-reasoning-gym.md). The calls stay structured here; the episode
runner writes them in the tool-call format it parses (:mod:`rlvr.rollout.tools`), so the model
sees a call exactly as it must write one.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FewShotToolCall(_Strict):
    """One tool call of an assistant message: ``{name, arguments}``; OpenAI's ``{type:
    function, function: {name, arguments}}`` is read too (its arguments may be JSON text)."""

    name: str = Field(description="the tool called")
    arguments: dict[str, Any] = Field(default_factory=dict, description="its arguments")

    @model_validator(mode="before")
    @classmethod
    def _openai_form(cls, value: Any) -> Any:
        if not isinstance(value, dict) or "function" not in value:
            return value
        if value.get("type", "function") != "function" or not isinstance(value["function"], dict):
            return value  # left for the field checks to report
        call = dict(value["function"])
        if isinstance(call.get("arguments"), str):
            try:
                call["arguments"] = json.loads(call["arguments"] or "{}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"the call's arguments are not valid JSON: {exc.msg}") from None
        return call

    def as_message_call(self) -> dict[str, Any]:
        """The call as a chat message's ``tool_calls`` entry (what rlvr parses a call into)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class FewShotMessage(_Strict):
    """One message of a worked exchange."""

    role: Literal["user", "assistant", "tool"] = Field(description="who speaks")
    content: str = Field("", description="its text (an assistant's text before its calls)")
    tool_calls: list[FewShotToolCall] = Field(
        default_factory=list, description="an assistant message's tool calls"
    )
    name: str | None = Field(
        None, description="a tool message's tool (default: the call it answers)"
    )

    @model_validator(mode="after")
    def _fits_role(self) -> FewShotMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"a {self.role} message cannot have tool_calls (only an assistant's)")
        if self.name is not None and self.role != "tool":
            raise ValueError(f"a {self.role} message has no name (only a tool message's)")
        return self


class FewShotExample(_Strict):
    """One worked exchange shown before every prompt: ``user`` and ``assistant`` (a question and
    the answer to imitate), or ``messages`` (an exchange with tool calls and the tools'
    answers)."""

    user: str | None = Field(None, description="the example question, as a user turn")
    assistant: str | None = Field(None, description="its answer, in the form the rewards check")
    messages: list[FewShotMessage] = Field(
        default_factory=list,
        description="the exchange as chat messages (user, assistant with tool_calls, tool, ..., "
        "the final assistant answer), instead of user and assistant",
    )

    @model_validator(mode="after")
    def _one_form(self) -> FewShotExample:
        pair = self.user is not None or self.assistant is not None
        if self.messages:
            if pair:
                raise ValueError("give user and assistant, or messages, not both")
            _check_exchange(self.messages)
        elif self.user is None or self.assistant is None:
            raise ValueError(
                "a worked exchange needs both user and assistant (or messages: a list of "
                "{role, content} with tool calls)"
            )
        return self

    @property
    def has_tool_calls(self) -> bool:
        return any(m.tool_calls for m in self.messages)

    def turns(self) -> list[dict[str, Any]]:
        """The exchange as chat messages; a tool message without a name gets the name of the
        call it answers."""
        if not self.messages:
            return [
                {"role": "user", "content": self.user},
                {"role": "assistant", "content": self.assistant},
            ]
        out: list[dict[str, Any]] = []
        pending: list[str] = []  # the names of the calls not answered yet, in order
        for m in self.messages:
            message: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                message["tool_calls"] = [c.as_message_call() for c in m.tool_calls]
                pending = [c.name for c in m.tool_calls]
            if m.role == "tool":
                called = pending.pop(0)
                message["name"] = m.name or called
            out.append(message)
        return out


def _check_exchange(messages: list[FewShotMessage]) -> None:
    """An exchange starts with the user, answers every call with one tool message right after
    it, and ends with an assistant answer without calls (the form to imitate)."""
    if not messages or messages[0].role != "user":
        raise ValueError("messages must start with a user message (the example question)")
    last = messages[-1]
    if last.role != "assistant" or last.tool_calls:
        raise ValueError(
            "messages must end with the assistant's final answer (an assistant message without "
            "tool_calls)"
        )
    unanswered = 0
    for k, m in enumerate(messages):
        if m.role == "tool":
            if unanswered == 0:
                raise ValueError(
                    f"messages[{k}] is a tool message that answers no call (each tool message "
                    "follows an assistant message with tool_calls, one per call)"
                )
            unanswered -= 1
            continue
        if unanswered:
            raise ValueError(
                f"messages[{k}]: the assistant's {unanswered} tool call(s) before it have no "
                "tool message answering them (one per call, right after the calls)"
            )
        unanswered = len(m.tool_calls)


__all__ = ["FewShotExample", "FewShotMessage", "FewShotToolCall"]
