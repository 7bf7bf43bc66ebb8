"""``report_to: wandb``: a Weights & Biases run per output directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.plugins.callbacks.base import Logger


class Wandb(Logger):
    id_file = "wandb_id.txt"

    def on_run_start(self, output_dir: Path, config: dict[str, Any], start_step: int) -> None:
        import wandb  # rlvr[wandb]

        run_id = self.saved_id(output_dir, start_step)
        self.run: Any = wandb.init(
            project=self.params.project,  # type: ignore[attr-defined]
            name=self.run_name(output_dir),
            dir=str(output_dir),
            config=config,
            id=run_id,
            resume="allow" if run_id else None,
        )
        self.save_id(output_dir, self.run.id)

    def on_log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def on_run_end(self, status: str) -> None:
        self.run.finish(exit_code=0 if status != "failed" else 1)
