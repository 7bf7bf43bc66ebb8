"""TRL-style reward functions for tests/test_reward_callable.py, written as TRL users write
them (batched lists in, one float or None per completion out). Module level, so reward worker
processes import them by name."""

from __future__ import annotations

import re

#: every call's keyword arguments, in-process only (tests read it)
CALLS: list[dict] = []


def record(prompts, completions, completion_ids, **kwargs):
    CALLS.append(
        {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **kwargs}
    )
    return [1.0 for _ in completions]


def correctness_reward_func(prompts, completions, answer, **kwargs):
    """The Unsloth/TRL GSM8K recipe's correctness reward (conversational completions)."""
    responses = [completion[0]["content"] for completion in completions]
    extracted = [r.split("<answer>")[-1].split("</answer>")[0].strip() for r in responses]
    return [2.0 if r == a else 0.0 for r, a in zip(extracted, answer, strict=True)]


def digits_reward(completions, scale=1.0, **kwargs):
    """Standard format: the share of digits in the completion text, times ``scale``."""
    return [scale * sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def length_if_tagged(completions, **kwargs):
    """None (not applicable) when the completion has no <answer> tag."""
    return [float(len(c)) if re.search(r"<answer>", c) else None for c in completions]


def two_values(completions, **kwargs):
    """Wrong: one value too many."""
    return [1.0] * (len(completions) + 1)


def not_a_list(completions, **kwargs):
    """Wrong: a bare float instead of a list."""
    return 1.0


class Scorer:
    @staticmethod
    def exact(completions, answer, **kwargs):
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]


def boom(completions, **kwargs):
    """Wrong: raises on every call."""
    raise RuntimeError("boom")


def boom_on_four(completions, answer, **kwargs):
    """Wrong for one row: raises when the answer is 4, else rewards the answer's presence."""
    if answer[0] == "4":
        raise ValueError(f"cannot score {completions[0]!r}")
    return [1.0 if answer[0] in c else 0.0 for c in completions]


# --------------------------------------------------------------------------- TRL 1.16's call
# Written as TRL's own and open-r1's are. Each writes what it saw to the JSON-lines file ``out``
# (a kwargs entry: they run in reward worker processes) and returns None for every completion
# whose first token id is odd, so those completions are unscorable (every reward None).


def _skip(ids):
    return ids is not None and len(ids) > 0 and ids[0] % 2 == 1


def _write(out, what, **seen):
    import json

    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"what": what, **seen}) + "\n")


def soft_overlong(completion_ids, out, max_len=8, cache=4, **kwargs):
    """TRL's ``get_soft_overlong_punishment``: 0 up to ``max_len - cache`` tokens, then a
    linear penalty down to -1 at ``max_len`` (reads ``completion_ids``)."""
    _write(out, "overlong", ids=completion_ids, completions=kwargs.get("completions"))
    rewards = []
    for ids in completion_ids:
        n = len(ids)
        if _skip(ids):
            rewards.append(None)
        elif n <= max_len - cache:
            rewards.append(0.0)
        elif n <= max_len:
            rewards.append((max_len - cache - n) / cache)
        else:
            rewards.append(-1.0)
    return rewards


def len_reward(completions, answer, completion_ids, out, **kwargs):
    """open-r1's ``len_reward`` (Kimi 1.5): batch-relative, 0.5 for the shortest completion
    of the batch down to -0.5 for the longest (correct ones; wrong ones at most 0)."""
    _write(out, "len", completions=completions, answer=answer)
    completion_ids = completion_ids or [None] * len(completions)  # a file of texts: no ids
    lengths = [len(c) for c in completions]
    lo, hi = min(lengths), max(lengths)
    if hi == lo:
        return [None if _skip(i) else 0.0 for i in completion_ids]
    rewards = []
    for c, a, n, ids in zip(completions, answer, lengths, completion_ids, strict=True):
        lam = 0.5 - (n - lo) / (hi - lo)
        rewards.append(None if _skip(ids) else (lam if a in c else min(0.0, lam)))
    return rewards


def at_step(completions, completion_ids, trainer_state, out, **kwargs):
    """A curriculum reward: reads ``trainer_state.global_step``, logs a column and a metric."""
    state = {"global_step": trainer_state.global_step, "max_steps": trainer_state.max_steps}
    _write(out, "state", state=state, epoch=trainer_state.epoch, n=len(completions))
    kwargs["log_extra"]("first_id", [ids[0] if ids else None for ids in completion_ids])
    kwargs["log_metric"]("batch_size", len(completions))
    return [None if _skip(i) else float(trainer_state.global_step) for i in completion_ids]


async def judged(prompts, completions, completion_ids, out, **kwargs):
    """An async reward (an LLM judge's shape): awaited by the caller."""
    import asyncio

    await asyncio.sleep(0)
    _write(out, "async", prompts=prompts, n=len(completions))
    return [None if _skip(i) else 0.25 for i in completion_ids]


def logs_a_metric(completions, log_metric, **kwargs):
    """Scores nothing (None: not applicable), logs a metric (TRL's ``log_metric``)."""
    log_metric("calls", 1.0)
    return [None] * len(completions)
