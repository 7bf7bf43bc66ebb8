"""``report_to: trackio``: a local-first trackio run per output directory (``trackio show``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.plugins.callbacks.base import Logger


class Trackio(Logger):
    def on_run_start(self, output_dir: Path, config: dict[str, Any], start_step: int) -> None:
        import trackio  # rlvr[trackio]

        self.trackio = trackio
        # trackio names runs: the same name continues the run on --resume
        self.run: Any = trackio.init(
            project=self.params.project,  # type: ignore[attr-defined]
            name=self.run_name(output_dir),
            space_id=self.params.space_id,  # type: ignore[attr-defined]
            config=config,
            resume="allow" if start_step > 0 else "never",
            embed=False,
        )

    def on_log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def on_run_end(self) -> None:
        self.run.finish()
