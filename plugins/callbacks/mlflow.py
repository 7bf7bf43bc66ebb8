"""``report_to: mlflow``: an MLflow run per output directory, continued on ``--resume``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlvr.plugins.callbacks.base import Logger

#: What MLflow refuses in a metric name (``eval/pass@1``): replaced by ``_``.
_NOT_ALLOWED = re.compile(r"[^\w\-. /:]")


class Mlflow(Logger):
    id_file = "mlflow_run_id.txt"

    def on_run_start(self, output_dir: Path, config: dict[str, Any], start_step: int) -> None:
        import mlflow  # rlvr[mlflow]

        self.mlflow = mlflow
        if self.params.tracking_uri:  # type: ignore[attr-defined]
            mlflow.set_tracking_uri(self.params.tracking_uri)  # type: ignore[attr-defined]
        mlflow.set_experiment(self.params.experiment)  # type: ignore[attr-defined]
        run_id = self.saved_id(output_dir, start_step)
        self.run: Any = mlflow.start_run(run_id=run_id, run_name=self.run_name(output_dir))
        if run_id is None:
            mlflow.log_params(_flat(config))
        self.save_id(output_dir, self.run.info.run_id)

    def on_log(self, step: int, scalars: dict[str, float]) -> None:
        self.mlflow.log_metrics(
            {_NOT_ALLOWED.sub("_", k): v for k, v in scalars.items()}, step=step
        )

    def on_run_end(self, status: str) -> None:
        self.mlflow.end_run(status="FAILED" if status == "failed" else "FINISHED")


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``section.key: value`` (MLflow params are flat strings of at most 6000 characters)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{name}."))
        else:
            out[_NOT_ALLOWED.sub("_", name)] = str(value)[:6000]
    return out
