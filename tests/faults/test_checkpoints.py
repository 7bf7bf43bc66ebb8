"""Damaged checkpoints (fault campaign, rlvr #35 items 4, 9 and 10): a resume never trusts a
checkpoint whose files changed after it was written, falls back to the newest intact one,
and every load error is one ``error:`` line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_run import error_lines, rlvr, write_config

from rlvr.outputs.checkpoint import latest_checkpoint, list_checkpoints

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
    files = {p.name for p in ckpt.iterdir() if p.is_file()} - {MANIFEST, "COMPLETE"}
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
