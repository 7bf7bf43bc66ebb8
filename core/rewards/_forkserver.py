"""Imported once by the reward workers' forkserver (its preload, :mod:`rlvr.rewards.pool`),
never by the trainer:

- a shutdown signal for the whole process group (SIGTERM from systemd or Slurm, SIGINT from
  Ctrl-C) must reach the trainer alone, which finishes its step and then stops the workers
  itself: the forkserver, and every worker it forks, lets both pass
  (:func:`~rlvr.rewards.pool_worker.shield_from_stop_signals`), so no reward call of a
  finishing step dies of the signal;
- a worker that dies before it runs reports why
  (:func:`~rlvr.rewards.pool_forkserver.report_start_errors`);
- the forkserver started with PYTHONSAFEPATH (no current directory on ``sys.path``) when rlvr
  set it; it is taken out of the environment the workers, and the programs rewards run, get.
"""

from __future__ import annotations

import os

from rlvr.rewards.pool_forkserver import ERRORS_DIR_ENV, SAFE_PATH_ENV, report_start_errors
from rlvr.rewards.pool_worker import shield_from_stop_signals

shield_from_stop_signals()
if os.environ.pop(SAFE_PATH_ENV, None):
    os.environ.pop("PYTHONSAFEPATH", None)
_errors = os.environ.pop(ERRORS_DIR_ENV, None)
if _errors:
    report_start_errors(_errors)
