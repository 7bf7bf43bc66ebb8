"""``reasoning_gym``: a reasoning-gym task's own ``score_answer`` on the extracted answer.

The row says which task made it and how (``task``, ``task_params``: what
``data.reasoning_gym`` writes, see docs/how-to/reasoning-gym.md), so one reward scores rows of
any task; the task's dataset object is built once per worker and (task, knobs)
(:func:`rlvr.data.reasoning_gym.reasoning_gym_dataset`). The entry handed to ``score_answer``
is the row's ``question``, ``answer`` and ``metadata`` (stored as JSON text; a dict is accepted
too).

Strict by default: the answer is the inside of the last ``<answer>...</answer>`` block
(``strategies``). With ``lenient`` the last number of the completion also counts (the score is
the better of the two), which separates what a model knows from the format it keeps.
``score_answer`` gives 1.0 to a right answer and may give partial credit (the arithmetic tasks
give ``len(gold) / len(answer)`` when the gold is inside a longer answer); ``rlvr eval`` counts
a completion as correct from ``correct`` (1.0) up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Imported here, though only rlvr.data.reasoning_gym.reasoning_gym_dataset uses it, so that a
# missing rlvr[reasoning-gym] stops the run when the reward is built, not at its first score.
import reasoning_gym  # noqa: F401

from rlvr._builtin import find_numbers, reasoning_gym_dataset, row_field
from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import ReasoningGymParams


class ReasoningGymReward:
    """Scores the extracted answer with the row's task's ``score_answer``."""

    def __init__(self, params: ReasoningGymParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        row = sample.row
        dataset = reasoning_gym_dataset(row_field(row, "task"), _json(row, "task_params"))
        entry = {
            "question": row.get("question"),
            "answer": row.get("answer"),
            "metadata": _json(row, "metadata"),
        }
        candidates = []
        found = p.extract(sample.completion)
        if found is not None:
            candidates.append(found.text)
        if p.lenient:
            numbers = find_numbers(sample.completion)
            if numbers:
                candidates.append(numbers[-1].text.replace("$", "").replace(" ", ""))
        if not candidates:
            return p.no_answer
        return max(float(dataset.score_answer(answer=a, entry=entry)) for a in candidates)


def _json(row: Mapping[str, Any], field: str) -> dict[str, Any]:
    """A row field that holds a JSON object as text (or the object itself; None: empty)."""
    value = row.get(field)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    loaded = json.loads(value)
    if not isinstance(loaded, dict):
        raise ValueError(f"row field {field!r} must hold a JSON object, got {str(value)[:80]!r}")
    return loaded
