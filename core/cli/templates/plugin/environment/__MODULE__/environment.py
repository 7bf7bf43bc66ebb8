"""The ``__NAME__`` environment itself.

Imported by its ``LazyFactory`` when a run builds it: import what it needs (a task server's
client, a sandbox) at the top of this module.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo

from __MODULE__.params import __CLS__Params


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (commas dropped), or None."""
    found = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    return found[-1] if found else None


class __CLS__:
    """Tells the model whether its answer (the last number it wrote) is the row's.

    One object serves every episode of a run, concurrently: what belongs to one episode lives
    in the ``state`` that ``start`` returns, never on ``self``.
    """

    def __init__(self, params: __CLS__Params, run: RunInfo):
        self.params = params

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        # prompt: the data config's conversation for the row (system prompt + prompt field)
        answer = last_number(str(row.get(self.params.field, "")))
        return EpisodeStart(messages=list(prompt), state={"answer": answer, "tries": 0})

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        state["tries"] += 1
        guess = last_number(message.get("content") or "")
        if guess is not None and guess == state["answer"]:
            return EnvResponse(done=True, rewards={"solved": 1.0})
        if state["tries"] >= self.params.tries:
            return EnvResponse(done=True, rewards={"solved": 0.0})
        return EnvResponse(messages=[{"role": "user", "content": self.params.feedback}])

    async def close(self, state: Any) -> None:
        """Nothing is held (a sandbox or a connection would be released here)."""
