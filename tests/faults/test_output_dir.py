"""The output directory (fault campaign, rlvr #35 items 2, 7 and 8): one run at a time holds
it, a run that died before its first checkpoint is started over by the same command, and rlvr
never writes over a file it did not create."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import yaml
from tiny_run import error_lines, rlvr, rlvr_process, wait_for, write_config

from rlvr.outputs.checkpoint import list_checkpoints
from rlvr.outputs.metrics import read_metrics

RECORD = ".rlvr-run.json"
#: The test hook that sleeps inside checkpoint STEP's write, before its COMPLETE marker.
SLEEP = "RLVR_TEST_CHECKPOINT_SLEEP"


def _holder(out: Path) -> dict:
    try:
        return json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- item 2


def test_a_second_run_on_the_same_output_dir_stops(tmp_path, tiny_model_dir):
    """Before: both runs exited 0 and every file was the second run's."""
    out = tmp_path / "out"
    config = write_config(tmp_path, tiny_model_dir, out)
    first = rlvr_process(
        "train", config, "--set", "training.seed=1", env={SLEEP: "2:15"}
    )  # holds the directory for 15 s inside its checkpoint write
    try:
        wait_for(lambda: _holder(out).get("pid") == first.pid, first)
        second = rlvr_process("train", config, "--set", "training.seed=2")
        _, err = second.communicate(timeout=180)
        assert second.returncode == 1
        [line] = error_lines(err)
        assert f"{out} is in use by another run (pid {first.pid} on " in line, line
        assert "started " in line and "training.seed=1" in line  # when and what holds it
        assert first.wait(timeout=180) == 0, first.stderr.read()[-4000:]
    finally:
        first.kill()
        first.communicate()
    assert yaml.safe_load((out / "config.yaml").read_text())["training"]["seed"] == 1
    saved = yaml.safe_load((out / "checkpoint-2" / "rlvr_config.yaml").read_text())
    assert saved["training"]["seed"] == 1
    assert [m["step"] for m in read_metrics(out)] == [1, 2]


# --------------------------------------------------------------------------- item 7


def _killed_before_the_first_checkpoint(tmp_path: Path, model: Path) -> tuple[Path, Path]:
    """A run SIGKILLed while it writes its first checkpoint (steps 1 and 2 logged)."""
    out = tmp_path / "out"
    config = write_config(tmp_path, model, out)
    proc = rlvr_process("train", config, env={SLEEP: "2:300"})
    try:
        wait_for(lambda: (out / ".checkpoint-2.tmp" / "trainer_state.json").is_file(), proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert [m["step"] for m in read_metrics(out)] == [1, 2]
    assert not list_checkpoints(out)
    assert _holder(out)["pid"] == proc.pid  # the dead run's lock file: taken over below
    return config, out


def test_a_run_killed_before_its_first_checkpoint_restarts(
    tmp_path, tiny_model_dir, capsys, caplog
):
    """Before: the same command said "already holds a run; pass --resume", and --resume
    "no complete checkpoint": a dead end."""
    config, out = _killed_before_the_first_checkpoint(tmp_path, tiny_model_dir)
    code, err = rlvr(capsys, "train", config)
    assert code == 0, err
    assert "stopped before its first checkpoint; starting it over" in caplog.text
    # Nothing of the dead run is kept: its steps are logged once, by the new run.
    assert [m["step"] for m in read_metrics(out)] == [1, 2]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == [1]
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]
    assert not (out / ".checkpoint-2.tmp").exists()


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_over(
    tmp_path, tiny_model_dir, capsys, caplog
):
    config, out = _killed_before_the_first_checkpoint(tmp_path, tiny_model_dir)
    code, err = rlvr(capsys, "train", config, "--resume")
    assert code == 0, err
    assert "starting it over" in caplog.text
    assert [m["step"] for m in read_metrics(out)] == [1, 2]
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]


def test_an_output_dir_that_is_a_file_fails_before_the_model_loads(
    tmp_path, tiny_model_dir, capsys
):
    """Before: a raw FileExistsError after the model loaded."""
    out = tmp_path / "out"
    out.write_text("not a directory\n")
    config = write_config(tmp_path, tiny_model_dir, out)
    code, err = rlvr(capsys, "train", config)
    assert code == 2  # a config problem
    assert "Traceback" not in err
    assert f"training.output_dir: {out} is a file; set it to a directory" in err, err
    assert "computing in" not in err  # printed just before the model loads
    assert out.read_text() == "not a directory\n"


# --------------------------------------------------------------------------- item 8


def test_a_config_yaml_in_the_output_dir_is_never_overwritten(tmp_path, tiny_model_dir, capsys):
    """``output_dir: .`` next to the user's own ``config.yaml``: before, rlvr wrote its
    resolved config over it (comments and all) and trained."""
    config = write_config(tmp_path, tiny_model_dir, ".", name="config.yaml")
    mine = "# my settings, with comments\n" + config.read_text()
    config.write_text(mine)
    code, err = rlvr(capsys, "train", config)
    assert code == 1
    [line] = error_lines(err)
    assert "holds config.yaml, which rlvr did not create" in line, line
    assert "set training.output_dir to another directory" in line
    assert config.read_text() == mine
    assert not list_checkpoints(tmp_path) and not (tmp_path / "metrics.jsonl").exists()
    assert not (tmp_path / RECORD).exists()  # #45 item 24: a refused directory gets no record


def test_an_output_dir_with_other_files_is_fine_and_resumable(tmp_path, tiny_model_dir, capsys):
    """Files of other names are left alone; what rlvr created there is recorded, so the run
    resumes (and rewrites its own config.yaml) in the same directory."""
    config = write_config(tmp_path, tiny_model_dir, ".", name="run.yaml")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, err = rlvr(capsys, "train", config)
    assert code == 0, err
    code, err = rlvr(capsys, "train", config, "--resume", "--set", "training.max_steps=3")
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3]
    assert "config.yaml" in json.loads((tmp_path / RECORD).read_text())["created"]


def test_a_checkpoint_directory_of_another_trainer_is_never_replaced(
    tmp_path, tiny_model_dir, capsys
):
    """A ``checkpoint-2`` without rlvr's COMPLETE marker (an HF Trainer's) is not rlvr's:
    before, the run's own checkpoint-2 replaced it."""
    out = tmp_path / "out"
    theirs = out / "checkpoint-2"
    theirs.mkdir(parents=True)
    (theirs / "pytorch_model.bin").write_bytes(b"theirs")
    config = write_config(tmp_path, tiny_model_dir, out)
    code, err = rlvr(capsys, "train", config)
    assert code == 1
    [line] = error_lines(err)
    assert "checkpoint-2 (no COMPLETE marker: not an rlvr checkpoint)" in line, line
    assert os.listdir(theirs) == ["pytorch_model.bin"]
    assert sorted(os.listdir(out)) == ["checkpoint-2"]  # #45 item 24: no record left there
