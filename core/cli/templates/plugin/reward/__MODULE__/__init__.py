"""The ``__NAME__`` reward plugin for rlvr.

Does the completion contain a given text?

After ``pip install -e .`` use it in any rlvr config::

    rewards:
      - name: __NAME__
        params: {text: "</answer>", score: 1.0}

A reward is a picklable callable built once per reward worker process by ``factory(params)``
and called once per completion with an :class:`rlvr.api.registration.Sample`: ``completion``,
``prompt``, ``row`` (every field of the dataset row) and ``num_tokens``. It returns a float, or
None when it does not apply to the sample (counted as 0 in the weighted sum and left out of
this reward's mean). A call that raises or runs past the entry's ``timeout`` yields the
entry's ``fallback`` value; the run goes on.
"""

from __future__ import annotations

from pydantic import Field
from rlvr import Params, Reward, Sample, hookimpl


class __CLS__Params(Params):
    """The reward's params (``rewards[].params`` in a config); unknown keys are errors."""

    text: str = Field("</answer>", min_length=1, description="text the completion must contain")
    field: str | None = Field(
        None, description="dataset field whose value must appear instead of `text` (null: off)"
    )
    score: float = Field(1.0, description="score when the completion contains it")
    miss_score: float = Field(0.0, description="score when it does not")


class __CLS__:
    """Scores ``score`` when the completion contains the text, else ``miss_score``."""

    def __init__(self, params: __CLS__Params) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        target = p.text if p.field is None else str(sample.row[p.field]).strip()
        if not target:
            return None  # nothing to look for in this row: not applicable
        return p.score if target in sample.completion else p.miss_score


def _fields(params: __CLS__Params) -> tuple[str, ...]:
    """The dataset fields the reward reads: rlvr checks a dataset has them before training."""
    return (params.field,) if params.field else ()


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="__NAME__",
            params=__CLS__Params,
            # A module-level class or function: reward workers import it by reference.
            factory=__CLS__,
            description="score when the completion contains a text (or a dataset field)",
            fields=_fields,
        )
    )
