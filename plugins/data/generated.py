"""The ``reasoning_gym`` source: a task's rows for one split, made by rlvr's reasoning-gym
generator (its hash split keeps the held-out rows out of training by construction)."""

from __future__ import annotations

from typing import Any

from rlvr._builtin import reasoning_gym_rows
from rlvr.plugins.data.params import ReasoningGymParams


def reasoning_gym_split(params: ReasoningGymParams, split: str) -> list[dict[str, Any]]:
    return reasoning_gym_rows(params, split)


__all__ = ["reasoning_gym_split"]
