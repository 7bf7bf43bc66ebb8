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
