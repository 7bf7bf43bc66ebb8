"""#35 item 13: ``reward_errors.jsonl`` was not cut back on resume, as metrics.jsonl is: the
steps run again after a resume recorded their errors a second time. A resumed run now leaves
the file an uninterrupted run leaves."""

from __future__ import annotations

from pathlib import Path

from rlvr.cli.main import main

# Rows in order, 2 a step: the reward returns 1e308 for answer 5, rows 3 (step 2) and 6 (step
# 4); the same error, so an uninterrupted run records it once, at step 2.
REWARDS = [
    {"name": "callable", "label": "digits", "params": {"function": "rewards.py:digits"}},
    {"name": "callable", "label": "huge", "params": {"function": "rewards.py:huge_on_five"}},
]


def _errors(out: Path) -> str:
    return (out / "reward_errors.jsonl").read_text()


def _config(write_run, tmp_path: Path, name: str, **training) -> Path:
    t = {"max_steps": 4, "reward_workers": 0, "output_dir": str(tmp_path / name), **training}
    return write_run(rewards=REWARDS, training=t, name=f"{name}.yaml")


def test_reward_errors_after_the_checkpoint_are_cut_on_resume(write_run, tmp_path, capsys):
    assert main(["train", "--allow-code", str(_config(write_run, tmp_path, "whole"))]) == 0
    expected = _errors(tmp_path / "whole")
    assert [line.count('"step": 2') for line in expected.splitlines()] == [1]
    # Step 2's error share (4 of 8) passes 0.25: the run stops, saved at step 1, with step 2's
    # error recorded; resumed with the limit raised, step 2 runs again.
    split = _config(write_run, tmp_path, "split", max_reward_error_frac=0.25)
    assert main(["train", "--allow-code", str(split)]) == 1
    assert '"step": 2' in _errors(tmp_path / "split")
    resumed = ["--set", "training.max_reward_error_frac=0.5", "--resume"]
    assert main(["train", "--allow-code", str(split), *resumed]) == 0
    assert _errors(tmp_path / "split") == expected
    capsys.readouterr()


def test_errors_kept_on_resume_are_not_recorded_again(write_run, tmp_path, monkeypatch, capsys):
    assert main(["train", "--allow-code", str(_config(write_run, tmp_path, "whole"))]) == 0
    expected = _errors(tmp_path / "whole")
    # Saved at step 2 (its error recorded), interrupted in step 3: the resumed run meets the
    # same error at step 4, which an uninterrupted run does not record again.
    from rlvr.rewards.scoring import Scorer

    original, calls = Scorer.score, {"n": 0}

    def score(self, samples, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, samples, **kwargs)

    split = _config(write_run, tmp_path, "split", save_steps=2)
    with monkeypatch.context() as m:
        m.setattr(Scorer, "score", score)
        assert main(["train", "--allow-code", str(split)]) == 130
    assert main(["train", "--allow-code", str(split), "--resume"]) == 0
    assert _errors(tmp_path / "split") == expected
    capsys.readouterr()
