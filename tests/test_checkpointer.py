"""Components that save themselves (#43 item 2): a checkpoint is whatever the run's
checkpointer was built from, so a new stateful piece round-trips through save and resume by
being added to :meth:`Trainer.stateful`; and the policies the loop asks (when to evaluate,
save and stop) say what the loop did inline before."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

import test_trainer  # noqa: E402

from rlvr.training.in_training_eval import EvalSchedule, KeepBest  # noqa: E402
from rlvr.training.stateful import Stateful  # noqa: E402
from rlvr.training.stopping import BadSteps, StopReasons, close_all  # noqa: E402
from rlvr.training.trainer import Trainer  # noqa: E402

tiny_model, dataset = test_trainer.tiny_model, test_trainer.dataset
host, make_config = test_trainer.host, test_trainer.make_config


class StepLog:
    """A new JSON piece: the steps it has seen (a resumed run must see the earlier ones)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = [int(s) for s in state["steps"]]


class WithNewPieces(Trainer):
    """A trainer with two pieces more: ``step_log`` (JSON) and ``probe`` (tensors), each
    changed by every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_log = StepLog()
        self.probe = torch.nn.Linear(3, 2)

    def stateful(self) -> dict[str, dict[str, Stateful]]:
        pieces = super().stateful()
        pieces["state"]["step_log"] = self.step_log
        pieces["tensors"]["probe"] = self.probe
        return pieces

    def train_step(self) -> dict[str, Any]:
        m = super().train_step()
        self.step_log.steps.append(self.step)
        with torch.no_grad():
            self.probe.weight.add_(float(self.step))
        return m


def _run(config, host, *, resume: bool = False) -> WithNewPieces:
    trainer = WithNewPieces(config, host, resume=resume, progress=False)
    trainer.run()
    return trainer


def test_a_new_stateful_piece_round_trips_through_save_and_resume(make_config, host):
    first = _run(make_config(max_steps=2, save_steps=1), host)
    out = Path(first.config.training.output_dir)
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert saved["step_log"] == {"steps": [1, 2]}
    assert torch.equal(
        torch.load(out / "checkpoint-2" / "probe.pt")["weight"], first.probe.weight.detach()
    )

    resumed = WithNewPieces(make_config(max_steps=3, save_steps=1), host, resume=True)
    try:
        resumed.setup()  # restores every piece the mapping names
        assert resumed.step == 2 and resumed.step_log.steps == [1, 2]
        assert torch.equal(resumed.probe.weight, first.probe.weight)
    finally:
        resumed.close()
    third = _run(make_config(max_steps=3, save_steps=1), host, resume=True)
    assert third.step_log.steps == [1, 2, 3]  # went on from the saved piece, not from scratch


def test_the_time_budget_resumes(make_config, host):
    """The time budget's estimates are a piece: a resumed run judges its first step by the
    longest step already seen; its clock restarts (max_minutes is per process)."""
    first = Trainer(make_config(max_steps=2, save_steps=2), host, progress=False)
    first.run()
    out = Path(first.config.training.output_dir)
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert 0 < saved["time_budget"]["longest_step"] <= first.budget.longest_step

    resumed = Trainer(make_config(max_steps=3), host, resume=True, progress=False)
    try:
        resumed.setup()
        assert resumed.budget.longest_step == saved["time_budget"]["longest_step"]
        assert resumed.budget.minutes() < first.budget.minutes()  # a fresh clock
    finally:
        resumed.close()


def test_a_checkpoint_keeps_the_layout_earlier_runs_wrote(make_config, host):
    """The pieces land where rlvr has always put them, so a checkpoint of an earlier run
    resumes: the counters at the top of trainer_state.json, the data order and the collapse
    guard under their names, optimizer and scheduler in their own files."""
    trainer = _run(make_config(max_steps=2, save_steps=2, algorithm="ppo"), host)
    path = Path(trainer.config.training.output_dir) / "checkpoint-2"
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["bad_steps"] == 0 and state["metrics"]["step"] == 2
    assert state["data"] == trainer.sampler.state_dict() and "rewards" in state["collapse"]
    assert {"max_steps", "seed", "world_size", "prompts_per_step", "vocab_size"} <= state.keys()
    for name in ("optimizer.pt", "scheduler.pt", "value_model.pt", "rng_state.pt"):
        assert (path / name).is_file(), name


# --------------------------------------------------------------------------- the loop's policies


def test_the_eval_schedule():
    every_2 = EvalSchedule(2, max_steps=5)
    assert [s for s in range(6) if every_2.should_evaluate(s)] == [2, 4, 5]
    assert EvalSchedule(2, max_steps=5, on_start=True).should_evaluate(0)
    assert not any(
        EvalSchedule(None, max_steps=5, on_start=True).should_evaluate(s) for s in range(6)
    )


def test_keep_best_takes_only_a_better_eval():
    keep = KeepBest(enabled=True)
    seen = [
        keep.improved(m)
        for m in ({"eval/pass@1": 0.5}, {"eval/pass@1": 0.4}, {}, {"eval/pass@1": 0.7})
    ]
    assert seen == [0.5, None, None, 0.7] and keep.best == 0.7
    assert KeepBest(enabled=False).improved({"eval/pass@1": 0.9}) is None


def test_bad_steps_count_in_a_row():
    bad = BadSteps(limit=2)
    for skipped in (True, False, True):
        bad.observe(1, skipped)
    assert bad.count == 1 and not bad.too_many()
    bad.observe(2, True)
    assert bad.too_many() and "2 steps in a row" in str(bad.error(2, Path("checkpoint-2")))


@pytest.mark.parametrize(
    ("reasons", "first"),
    [
        (StopReasons(), None),
        (StopReasons(out_of_time=True, asked="done"), "asked"),
        (StopReasons(requested=True, collapsed=True), "requested"),
        (StopReasons(collapsed=True, out_of_time=True), "collapsed"),
        (StopReasons(out_of_time=True), "out_of_time"),
    ],
)
def test_stop_reasons_name_the_first_that_holds(reasons, first):
    assert reasons.first() == first and reasons.any() == (first is not None)


def test_a_ctrl_c_while_closing_still_closes_every_part(caplog):
    """A second Ctrl-C right after a stop lands while the run closes its parts (seen: while
    the server mode waited for its vLLM server to exit); the parts after it must close too,
    or the reward workers left open keep the process from exiting. Then it is raised."""
    closed = []

    class Part:
        def __init__(self, name, fails=None):
            self.name, self.fails = name, fails

        def close(self):
            closed.append(self.name)
            if self.fails is not None:
                raise self.fails

    parts = [
        Part("scorer"),
        Part("bad", RuntimeError("disk")),
        Part("servers", KeyboardInterrupt()),
    ]
    with pytest.raises(KeyboardInterrupt):
        close_all(parts)
    assert closed == ["servers", "bad", "scorer"] and parts == []
    assert "closing Part failed: disk" in caplog.text
