"""A generated completion as a step knows it (:class:`Completion`): made from a finished
multi-turn episode (:func:`episode_completion`), its final answer's tokens (:func:`answer_ids`),
and what ``samples.jsonl`` says about it (:func:`sample_record`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.data.prompts import PromptSet
from rlvr.rollout.episodes import Episode


@dataclass
class Completion:
    """One generated completion with everything a step needs about it."""

    prompt_index: int
    group: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    truncated: bool
    score: float = 0.0
    rewards: dict[str, float | None] = field(default_factory=dict)
    sampler_logp: list[float] | None = None
    kept: bool = True
    #: the row's own solution (``training.guidance``), not sampled from the policy.
    guide: bool = False
    #: some reward gave it a value (False: every reward returned None, TRL's unscorable row)
    scored: bool = True
    #: the columns batched rewards logged for it (TRL's ``log_extra``)
    extra: dict[str, Any] = field(default_factory=dict)
    #: multi-turn episodes: 1 on the tokens the model sampled, 0 on the environment's (None:
    #: every token was sampled).
    action_mask: list[int] | None = None
    #: multi-turn episodes: why the episode failed (it is then neither scored nor trained on).
    failed: str | None = None
    #: multi-turn episodes: the whole conversation (``text`` is the last assistant message).
    transcript: list[dict[str, Any]] | None = None
    #: multi-turn episodes: the first prompt as the model got it (the environment's messages and
    #: tools rendered), which ``samples.jsonl`` shows instead of the data's prompt.
    prompt_text: str | None = None
    #: multi-turn episodes: the named rewards the environment returned (added to ``score``
    #: with their ``environment.reward_weights``; also in ``rewards``).
    env_rewards: dict[str, float] = field(default_factory=dict)
    #: multi-turn episodes: the whole episode after its first prompt, decoded (what a reward
    #: whose scope is ``transcript`` scores).
    transcript_text: str | None = None
    #: asynchronous rollouts (``training.max_staleness``): the weights that sampled it, as the
    #: step whose update made them (0: the run's initial weights); None: the step's own weights.
    policy_version: int | None = None


def episode_completion(e: Episode) -> Completion:
    """The :class:`Completion` of a finished episode: its tokens as sampled and appended."""
    return Completion(
        prompt_index=e.prompt_index,
        group=e.group,
        prompt_ids=e.prompt_ids,
        token_ids=e.token_ids,
        text=e.final_text,
        truncated=e.truncated,
        sampler_logp=e.logprobs if e.sampled_logprobs else None,
        kept=e.failed is None,
        scored=e.failed is None,  # a failed episode has no reward (not 0.0)
        action_mask=e.action_mask,
        failed=e.failed,
        transcript=e.messages,
        prompt_text=e.prompt_text or None,  # None: it failed before its prompt was rendered
        env_rewards=dict(e.rewards),
        transcript_text=e.transcript_text,
    )


def answer_ids(c: Completion) -> list[int]:
    """The tokens of ``c``'s final answer: all of a single completion, the last sampled turn
    of an episode (the run of 1s that ends its action mask)."""
    if c.action_mask is None:
        return c.token_ids
    end = len(c.action_mask)
    while end > 0 and c.action_mask[end - 1] == 0:
        end -= 1
    start = end
    while start > 0 and c.action_mask[start - 1] == 1:
        start -= 1
    return c.token_ids[start:end]


def sample_record(c: Completion, prompts: PromptSet, prompt_field: str) -> dict[str, Any]:
    """What ``samples.jsonl`` says about one completion (train and eval add their fields)."""
    prompt = prompts[c.prompt_index]
    record = {
        "prompt": prompt.text if c.prompt_text is None else c.prompt_text,
        "completion": c.text,
        "reward": c.score,
        "rewards": c.rewards,
        "num_tokens": len(c.token_ids),
        "truncated": c.truncated,
        "row": {k: v for k, v in prompt.row.items() if k != prompt_field},
    }
    if not c.scored:  # every reward returned None: left out of its group's baseline
        record["scored"] = False
    if c.extra:  # the columns rewards logged (TRL's log_extra)
        record["extra"] = c.extra
    return record | _episode_record(c)


def _episode_record(c: Completion) -> dict[str, Any]:
    """What ``samples.jsonl`` adds for a multi-turn episode (nothing for a completion)."""
    if c.transcript is None:
        return {}
    out: dict[str, Any] = {
        "transcript": c.transcript,
        "env_tokens": (c.action_mask or []).count(0),
        "env_rewards": c.env_rewards,
    }
    if c.failed is not None:
        out["failed"] = c.failed
    return out


__all__ = ["Completion", "answer_ids", "episode_completion", "sample_record"]
