"""Imported once by the reward workers' forkserver (its preload, :mod:`rlvr.rewards.pool`), never
by the trainer: a shutdown signal for the whole process group (SIGTERM from systemd or Slurm,
SIGINT from Ctrl-C) must reach the trainer alone, which finishes its step and then stops the
workers itself. From here on the forkserver, and every worker it forks, lets both pass
(:func:`~rlvr.rewards.pool.shield_from_stop_signals`), so no reward call of a finishing step
dies of the signal.
"""

from __future__ import annotations

from rlvr.rewards.pool import shield_from_stop_signals

shield_from_stop_signals()
