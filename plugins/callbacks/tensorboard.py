"""``report_to: tensorboard``: event files in ``OUTPUT_DIR/tensorboard``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.plugins.callbacks.base import Logger


class TensorBoard(Logger):
    def on_run_start(self, output_dir: Path, start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # rlvr[tensorboard]

        log_dir = self.params.log_dir or str(Path(output_dir) / "tensorboard")  # type: ignore[attr-defined]
        # purge_step: a resumed run drops the events a crashed session wrote past its checkpoint
        self.writer: Any = SummaryWriter(log_dir=log_dir, purge_step=start_step + 1)

    def on_log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def on_run_end(self) -> None:
        self.writer.close()
