"""``single_turn``: today's behaviour as an environment. The episode is the dataset prompt and
one completion; the rewards score it.

Training never calls this object: the environment's record says ``multi_turn=False``, so the
trainer samples on the single-completion path it always had (same prompts, seeds and batches:
results are those of a config without an ``environment:`` section). It is still a complete
environment, for tools that drive episodes through the protocol.
"""

from __future__ import annotations

from typing import Any

from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo
from rlvr.plugins.environments.params import SingleTurnParams


class SingleTurnEnvironment:
    """Starts with the data config's prompt; any answer ends the episode."""

    def __init__(self, params: SingleTurnParams, run: RunInfo):
        self.params = params

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        return EpisodeStart(messages=list(prompt))

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        return EnvResponse(done=True)

    async def close(self, state: Any) -> None:
        """Nothing is held."""


__all__ = ["SingleTurnEnvironment"]
