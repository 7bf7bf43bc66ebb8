"""``reasoning_gym``: a reasoning-gym task as an environment, by name.

The rows are ``data.reasoning_gym``'s (the record's ``data`` hook hands the task fields to the
data section: one seeded generator stream, one hash split, so the held-out problems share no
question with the training ones, and ``rlvr eval`` and ``rlvr data`` read the same rows). The
judge is the ``reasoning_gym`` reward itself, built from its registered record with the
``scoring`` params (the task's own ``score_answer`` on the extracted answer); its value is the
environment's named reward ``score_answer``.

One answer per episode by default. With ``feedback_turns: N`` a wrong answer is answered with
``feedback`` and the model tries again, up to N times; the episode's reward is its last
answer's score (a right answer ends the episode).
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo, Sample
from rlvr.plugins.environments.params import SCORE_ANSWER, ReasoningGymEnvParams, scoring_reward


class ReasoningGymEnvironment:
    """Asks the row's question; scores each answer with the task's ``score_answer``."""

    def __init__(self, params: ReasoningGymEnvParams, run: RunInfo):
        self.params = params
        # The reasoning_gym reward itself, built from its record: one scoring code path.
        record = scoring_reward()
        self.scoring = record.params.model_validate(params.scoring)
        self.judge = record.factory(self.scoring)

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        return EpisodeStart(messages=list(prompt), state={"row": row, "answers": 0})

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        sample = Sample(completion=str(message.get("content") or ""), row=state["row"])
        # score_answer may be slow (a symbolic check): off the episodes' event loop
        score = float(await asyncio.to_thread(self.judge, sample))
        state["answers"] += 1
        rewards = {SCORE_ANSWER: score}
        right = score >= self.scoring.correct
        if right or state["answers"] > self.params.feedback_turns:
            return EnvResponse(done=True, rewards=rewards)
        feedback = {"role": "user", "content": self.params.feedback}
        return EnvResponse(messages=[feedback], rewards=rewards)

    async def close(self, state: Any) -> None:
        """Nothing is held."""


__all__ = ["ReasoningGymEnvironment"]
