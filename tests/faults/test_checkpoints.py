"""Damaged checkpoints (fault campaign, rlvr #35 items 4, 9 and 10): a resume never trusts a
checkpoint whose files changed after it was written, falls back to the newest intact one,
and every load error is one ``error:`` line naming the file."""

from __future__ import annotations

import importlib
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from tiny_run import error_lines, rlvr, rlvr_process, wait_for, write_config

from rlvr.cli.main import main
from rlvr.outputs.checkpoint import MARK, latest_checkpoint, list_checkpoints, save_checkpoint
from rlvr.outputs.metrics import read_metrics

MANIFEST = "manifest.json"


def _trained(tmp_path: Path, model: Path, capsys, steps: int = 2, **training) -> tuple[Path, Path]:
    out = tmp_path / "out"
    config = write_config(tmp_path, model, out, max_steps=steps, **training)
    code, err = rlvr(capsys, "train", config)
    assert code == 0, err
    return config, out


def _resume(capsys, config: Path, steps: int) -> tuple[int, str]:
    return rlvr(capsys, "train", config, "--resume", "--set", f"training.max_steps={steps}")


def test_the_manifest_covers_every_file(tmp_path, tiny_model_dir, capsys):
    _, out = _trained(tmp_path, tiny_model_dir, capsys)
    ckpt = out / "checkpoint-2"
    listed = json.loads((ckpt / MANIFEST).read_text())["files"]
    files = {p.name for p in ckpt.iterdir() if p.is_file()} - {MANIFEST, "COMPLETE", MARK}
    assert set(listed) == files
    assert {"model.safetensors", "tokenizer.json", "optimizer.pt"} <= files
    assert listed["model.safetensors"]["bytes"] == (ckpt / "model.safetensors").stat().st_size


def test_a_deleted_tokenizer_stops_the_resume(tmp_path, tiny_model_dir, capsys):
    """Before: the resume loaded a 2-token tokenizer (the model has 512), trained on empty
    completions and saved that tokenizer into checkpoint-3, exit code 0."""
    config, out = _trained(tmp_path, tiny_model_dir, capsys)
    (out / "checkpoint-2" / "tokenizer.json").unlink()
    code, err = _resume(capsys, config, 3)
    assert code == 1
    [line] = error_lines(err)
    assert "checkpoint-2" in line and "tokenizer.json: missing" in line, line
    assert latest_checkpoint(out) == out / "checkpoint-2"


def test_flipped_bytes_in_the_weights_are_detected(tmp_path, tiny_model_dir, capsys):
    config, out = _trained(tmp_path, tiny_model_dir, capsys)
    weights = out / "checkpoint-2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size: only a checksum can tell
    weights.write_bytes(bytes(data))
    code, err = _resume(capsys, config, 3)
    assert code == 1
    [line] = error_lines(err)
    assert "model.safetensors: its sha256 differs from the manifest's" in line, line
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]


def test_eval_refuses_a_checkpoint_with_flipped_bytes(tmp_path, tiny_model_dir, capsys):
    """#45 item 21: ``rlvr eval --checkpoint`` loaded the damaged weights and reported numbers,
    exit code 0. It now checks the manifest as ``--resume`` does."""
    config, out = _trained(tmp_path, tiny_model_dir, capsys)
    code, err = rlvr(capsys, "eval", config, "--checkpoint", out / "checkpoint-2", "--limit", "2")
    assert code == 0, err  # intact: evaluated
    weights = out / "checkpoint-2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    for checkpoint in (out / "checkpoint-2", out):  # named, or the output_dir's latest
        code, err = rlvr(capsys, "eval", config, "--checkpoint", checkpoint, "--limit", "2")
        assert code == 1
        [line] = error_lines(err)
        assert f"checkpoint {out / 'checkpoint-2'} is damaged" in line, line
        assert "model.safetensors: its sha256 differs from the manifest's" in line, line
        assert "evaluate another checkpoint" in line, line


def test_a_users_look_alike_directories_are_never_deleted(tmp_path, tiny_model_dir, capsys):
    """#45 item 22: an output_dir holding a user's ``.checkpoint-7.tmp/keep.txt`` and
    ``.checkpoint-3.del/`` lost both, exit code 0, without a word. Only directories rlvr
    marked as its own are leftovers."""
    out = tmp_path / "out"
    (out / ".checkpoint-7.tmp").mkdir(parents=True)
    (out / ".checkpoint-7.tmp" / "keep.txt").write_text("mine")
    (out / ".checkpoint-3.del").mkdir()
    _trained(tmp_path, tiny_model_dir, capsys)
    assert (out / ".checkpoint-7.tmp" / "keep.txt").read_text() == "mine"
    assert (out / ".checkpoint-3.del").is_dir()
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]


def test_a_save_that_would_replace_a_users_directory_stops_instead(tmp_path):
    (tmp_path / ".checkpoint-1.tmp").mkdir()
    (tmp_path / ".checkpoint-1.tmp" / "keep.txt").write_text("mine")
    with pytest.raises(Exception, match=r"\.checkpoint-1\.tmp is in the way.*not rlvr's"):
        save_checkpoint(
            tmp_path,
            1,
            model=None,
            tokenizer=None,
            optimizer=None,
            scheduler=None,
            state={"data": {}},
        )
    assert (tmp_path / ".checkpoint-1.tmp" / "keep.txt").read_text() == "mine"


def test_a_leftover_of_an_interrupted_save_is_still_removed(
    tmp_path, tiny_model_dir, capsys, caplog
):
    """The other side of item 22: what a killed save left (marked first thing) goes, and the
    run says so."""
    config = write_config(
        tmp_path, tiny_model_dir, tmp_path / "out", max_steps=3, save_steps=1, save_total_limit=1
    )
    env = {"RLVR_TEST_CHECKPOINT_SLEEP": "2:300"}  # sleeps inside the write of checkpoint 2
    proc = rlvr_process("train", config, env=env)
    out = tmp_path / "out"
    partial = out / ".checkpoint-2.tmp"
    try:
        wait_for(lambda: (partial / "trainer_state.json").is_file(), proc)
    finally:
        proc.kill()
        proc.communicate()
    assert (partial / MARK).is_file()
    code, err = _resume(capsys, config, 3)
    assert code == 0, err
    assert not partial.exists()
    assert "removed .checkpoint-2.tmp, left by an interrupted checkpoint save" in caplog.text
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-3"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".checkpoint")]


def test_a_tokenizer_that_does_not_fit_the_model_stops_the_resume(tmp_path, tiny_model_dir, capsys):
    """Without a manifest (a checkpoint of an older rlvr) the tokenizer is still checked
    against the vocabulary it was saved with and the model's embedding rows."""
    config, out = _trained(tmp_path, tiny_model_dir, capsys)
    (out / "checkpoint-2" / MANIFEST).unlink()
    (out / "checkpoint-2" / "tokenizer.json").unlink()
    code, err = _resume(capsys, config, 3)
    assert code == 1
    [line] = error_lines(err)
    from transformers import AutoTokenizer

    n = len(AutoTokenizer.from_pretrained(tiny_model_dir))
    assert f"its tokenizer has 2 tokens (it was saved with {n}" in line, line
    assert f"{n} embedding rows" in line and "tokenizer.json" in line
    assert latest_checkpoint(out) == out / "checkpoint-2"


# --------------------------------------------------------------------------- item 9


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:1000])


def _drop_data_key(file: Path) -> None:
    state = json.loads(file.read_text())
    del state["data"]
    file.write_text(json.dumps(state))


#: (file, what is done to it, words the message must hold)
DAMAGES = {
    "truncated weights": ("model.safetensors", _truncate, "model.safetensors"),
    "garbled trainer state": (
        "trainer_state.json",
        lambda f: f.write_text("{garbled"),
        "trainer_state.json",
    ),
    "trainer state without its data": ("trainer_state.json", _drop_data_key, "trainer_state.json"),
    "missing optimizer": ("optimizer.pt", Path.unlink, "optimizer.pt"),
    "empty scheduler": ("scheduler.pt", lambda f: f.write_bytes(b""), "scheduler.pt"),
}


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, tiny_model_dir) -> Path:
    """A run of 4 steps with checkpoint-2 and checkpoint-4 (copied by each test)."""
    root = tmp_path_factory.mktemp("two")
    # A relative output_dir resolves against the config's directory: each copy is its own run.
    config = write_config(root, tiny_model_dir, "out", max_steps=4)
    assert main(["train", str(config)]) == 0
    return root


@pytest.mark.parametrize("damage_name", list(DAMAGES))
def test_a_damaged_latest_checkpoint_is_skipped(
    damage_name, two_checkpoints, tmp_path, capsys, caplog
):
    """Before: a truncated safetensors showed `ModuleNotFoundError: No module named 'gguf'`,
    a garbled trainer_state.json "the config differs from the checkpoint's", a missing key
    a raw KeyError, a missing optimizer.pt a FileNotFoundError, an empty scheduler.pt a bare
    EOFError; none fell back to checkpoint-2."""
    shutil.copytree(two_checkpoints, tmp_path / "run")
    out = tmp_path / "run" / "out"
    name, do, words = DAMAGES[damage_name]
    do(out / "checkpoint-4" / name)
    code, err = _resume(capsys, tmp_path / "run" / "run.yaml", 4)
    assert code == 0, err
    assert not error_lines(err)
    said = caplog.text  # the warnings (the CLI prints them on stderr)
    named = [line for line in said.splitlines() if "checkpoint-4" in line and words in line]
    assert named, said
    assert "resuming from checkpoint-2, the newest intact checkpoint" in said
    # Steps 3 and 4 trained again from checkpoint-2; the new checkpoint-4 is whole.
    assert [m["step"] for m in read_metrics(out)] == [1, 2, 3, 4]
    listed = json.loads((out / "checkpoint-4" / MANIFEST).read_text())["files"]
    assert listed[name]["bytes"] == (out / "checkpoint-4" / name).stat().st_size


@pytest.mark.parametrize("damage_name", list(DAMAGES))
def test_every_load_error_is_one_line_naming_the_file(
    damage_name, two_checkpoints, tmp_path, capsys
):
    """A checkpoint without a manifest (written by an older rlvr) is loaded as it is: what
    cannot be read is named in one ``error:`` line, and nothing already saved is lost."""
    shutil.copytree(two_checkpoints, tmp_path / "run")
    out = tmp_path / "run" / "out"
    shutil.rmtree(out / "checkpoint-2")
    (out / "checkpoint-4" / MANIFEST).unlink()
    name, do, words = DAMAGES[damage_name]
    do(out / "checkpoint-4" / name)
    code, err = _resume(capsys, tmp_path / "run" / "run.yaml", 5)
    assert code == 1
    [line] = error_lines(err)
    assert words in line and "checkpoint-4" in line, line
    assert "gguf" not in err and "the config differs" not in line
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-4"]


def test_a_damaged_model_is_not_blamed_on_gguf(tmp_path, tiny_model_dir, monkeypatch):
    """Without the gguf package every load error was chained to its ImportError."""
    from rlvr.config.schema import ModelConfig
    from rlvr.model.loading import ModelLoadError, load_policy

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    _truncate(model / "model.safetensors")
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf raises ImportError
    with pytest.raises(ModelLoadError, match="model.safetensors") as info:
        load_policy(ModelConfig(name_or_path=str(model)), device="cpu")
    chain = "".join(traceback.format_exception(info.value))
    assert "ModuleNotFoundError" not in chain and "No module named" not in chain, chain


# --------------------------------------------------------------------------- item 10


def _can_mount_tmpfs() -> bool:
    probe = "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || mount -t tmpfs tmpfs /tmp"
    try:
        done = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True)
    except OSError:
        return False
    return done.returncode == 0


def _limit_file_size() -> None:  # runs in the child: writes past 600 kB fail with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
def test_a_full_disk_names_enospc_and_leaves_no_partial_checkpoint(how, tmp_path, tiny_model_dir):
    """``tmpfs``: the output directory is a 1.2 MB tmpfs (mounted in a user namespace, so no
    root is needed); the run's first checkpoint (1.5 MB) fills it. Before: torch's
    ``[enforce fail at inline_container.cc:672] unexpected pos`` and the partial
    ``.checkpoint-2.tmp`` left on the full disk. ``rlimit``: a 600 kB file size limit
    (RLIMIT_FSIZE) makes the write fail with EFBIG, through the same path."""
    out = tmp_path / "out"
    out.mkdir()
    config = write_config(tmp_path, tiny_model_dir, out)
    rlvr_cmd = f"{shlex.quote(sys.executable)} -m rlvr train {shlex.quote(str(config))}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if how == "tmpfs":
        if not _can_mount_tmpfs():
            pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
        script = (
            f"mount -t tmpfs -o size=1200k tmpfs {shlex.quote(str(out))} && "
            f"{{ {rlvr_cmd}; echo rc=$?; ls -a {shlex.quote(str(out))}; }}"
        )
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True
        )
        listing = done.stdout.split("rc=", 1)[1].split()
        code, left = int(listing[0]), listing[1:]
        expect = "no space left on device (ENOSPC)"
    else:
        done = subprocess.run(
            shlex.split(rlvr_cmd),
            env=env,
            capture_output=True,
            text=True,
            preexec_fn=_limit_file_size,
        )
        code, left = done.returncode, os.listdir(out)
        expect = "file too large (a file size limit, ulimit -f?) (EFBIG)"
    assert code == 1, done.stderr[-4000:]
    [line] = error_lines(done.stderr)
    assert f"cannot write checkpoint-2 in {out}: {expect}" in line, line
    assert "the partial .checkpoint-2.tmp was removed" in line
    assert not [name for name in left if "checkpoint" in name], left


@pytest.mark.parametrize("name", ["METRICS_FILE", "SAMPLES_FILE"])
def test_a_full_disk_under_the_metrics_is_one_error_line(
    name, tmp_path, tiny_model_dir, capsys, monkeypatch
):
    """#45 item 24: the run's metrics (or samples) written to ``/dev/full``, where every
    flush fails with ENOSPC. Before: a raw ``OSError: [Errno 28]`` traceback from
    ``outputs/metrics_logger.py``."""
    importlib.import_module("rlvr.outputs.rundir")  # its RUN_NAMES keep the real file names

    monkeypatch.setattr(f"rlvr.outputs.metrics_logger.{name}", "/dev/full")  # absolute: used as is
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "out")
    code, err = rlvr(capsys, "train", config)
    assert code == 1, err
    [line] = error_lines(err)
    assert line == (
        "error: cannot write full in /dev: No space left on device (ENOSPC); the run stops "
        "here. Free some space, then --resume continues from the last checkpoint"
    )
