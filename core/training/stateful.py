"""What a checkpoint is made of: pieces that save themselves.

A piece of a run whose state a resume needs (the data order, the optimizer, the collapse
guard's history, ...) is :class:`Stateful`: it hands out its state and takes it back, as
``torch.nn.Module`` and ``torch.optim.Optimizer`` do. The run's checkpointer
(:class:`rlvr.training.checkpointer.Checkpointer`) is built from a named mapping of them, so a
new piece is saved and resumed once it is in that mapping (docs/how-to/resume.md).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """Anything whose state a checkpoint keeps: ``load_state_dict(state_dict())`` on a fresh
    object of the same setup makes it continue as the original would."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


__all__ = ["Stateful"]
