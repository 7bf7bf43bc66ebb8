"""The params of the built-in loggers (``callbacks: [{name: wandb, params: {...}}]``; under
``training.report_to`` each runs with these defaults)."""

from __future__ import annotations

import os

from pydantic import Field

from rlvr.plugin import Params


class TensorBoardParams(Params):
    """``tensorboard``: event files in ``OUTPUT_DIR/tensorboard``."""

    log_dir: str | None = Field(None, description="where (null: OUTPUT_DIR/tensorboard)")


class WandbParams(Params):
    """``wandb``: one run per output directory, continued on ``--resume``."""

    project: str = Field(
        default_factory=lambda: os.environ.get("WANDB_PROJECT", "rlvr"),
        description="the project (default: $WANDB_PROJECT, else rlvr)",
    )
    name: str | None = Field(None, description="the run's name (null: the output directory's)")


class TrackioParams(Params):
    """``trackio``: local-first (``trackio show`` opens the dashboard), one run per output
    directory, continued on ``--resume``."""

    project: str = Field(
        default_factory=lambda: os.environ.get("TRACKIO_PROJECT", "rlvr"),
        description="the project (default: $TRACKIO_PROJECT, else rlvr)",
    )
    name: str | None = Field(None, description="the run's name (null: the output directory's)")
    space_id: str | None = Field(
        None, description="a Hugging Face Space to log to (null: local only)"
    )


class MlflowParams(Params):
    """``mlflow``: a run in an experiment; ``tracking_uri`` null uses MLflow's own setting
    ($MLFLOW_TRACKING_URI, else its default)."""

    experiment: str = Field(
        default_factory=lambda: os.environ.get("MLFLOW_EXPERIMENT_NAME", "rlvr"),
        description="the experiment (default: $MLFLOW_EXPERIMENT_NAME, else rlvr)",
    )
    tracking_uri: str | None = Field(None, description="where runs go (null: MLflow's default)")
    name: str | None = Field(None, description="the run's name (null: the output directory's)")


__all__ = ["MlflowParams", "TensorBoardParams", "TrackioParams", "WandbParams"]
