"""CPU seconds per phase of a training step (``training.profile_phases``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseClock:
    """CPU seconds of this process (all threads) in each named phase of a step, kept only when
    ``training.profile_phases`` asks for them (``profile/<phase>`` in ``metrics.jsonl``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        start = time.process_time()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.process_time() - start

    def take(self) -> dict[str, float]:
        """The phases' seconds since the last call, as ``profile/<phase>`` metrics."""
        out = {f"profile/{phase}": seconds for phase, seconds in self.seconds.items()}
        self.seconds.clear()
        return out


__all__ = ["PhaseClock"]
