"""The ``__NAME__`` reward itself.

Imported by its ``LazyFactory`` when a run builds it (in each reward worker): import what it
needs (a parser, a model) at the top of this module.
"""

from __future__ import annotations

from rlvr.plugin import Sample

from __MODULE__.params import __CLS__Params


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
