"""Guidance: a worked solution from the dataset joins its prompt's group as one completion.

A weak model whose own samples are rarely right gives a group-relative algorithm almost no
signal for correctness: a group of eight wrong answers has nothing to prefer. With
``training.guidance`` each group has ``num_generations - 1`` sampled completions and one more,
the row's own solution (e.g. GSM8K's ``answer``), tokenised as if the model had written it and
ended with the eos token. It is scored by the same rewards, so its advantage says how much
better it is than the samples beside it, and the update raises its likelihood by that much
(off-policy guidance, as in LUFFY, Yan et al. 2025). Its log-probabilities for the loss come
from the trainer like every other row's; the sampler never saw it, so the reward and length
metrics of a step stay those of the sampled completions alone, and ``guide/*`` reports the
guides.

A solution longer than ``training.max_completion_length`` tokens is not cut (a cut solution
has no answer): that group is sampled in full instead.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.data.prompts import PromptSet


class Guides:
    """The guide completion (text and token ids) of each row, built on first use."""

    def __init__(
        self,
        prompts: PromptSet,
        tokenizer: Any,
        *,
        field: str,
        remove: str | None,
        eos_id: int,
        max_tokens: int,
    ) -> None:
        self.prompts = prompts
        self.tokenizer = tokenizer
        self.field = field
        self.remove = re.compile(remove) if remove else None
        self.eos_id = eos_id
        self.max_tokens = max_tokens
        self._cache: dict[int, tuple[str, list[int]] | None] = {}

    def text(self, row: dict[str, Any]) -> str:
        """The row's solution as the completion's text."""
        text = str(row[self.field])
        if self.remove is not None:
            text = self.remove.sub("", text)
        return text.strip()

    def get(self, i: int) -> tuple[str, list[int]] | None:
        """Row ``i``'s guide as ``(text, token ids ending in eos)``; None when it does not fit."""
        if i not in self._cache:
            text = self.text(self.prompts[i].row)
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            ids.append(self.eos_id)
            self._cache[i] = (text, ids) if text and len(ids) <= self.max_tokens else None
        return self._cache[i]


__all__ = ["Guides"]
