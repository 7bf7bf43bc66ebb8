"""Code from data (fault campaign, rlvr #35 item 5): nothing from a checkpoint or a config is
unpickled or executed without an explicit opt-in on the command line. The flags:
``--allow-code`` (rewards that import code the config names: ``callable``) and
``--trust-remote-code`` (``model.trust_remote_code: true``), ``allow_code=`` and
``trust_remote_code=`` in Python."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from tiny_run import error_lines, rlvr, write_config

import rlvr as api
from rlvr.outputs.metrics import read_metrics

PAYLOAD_MARK = "RAN"


class _Payload:
    """Unpickling this creates ``path`` (what a planted pickle could do instead)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _train(tmp_path: Path, model: Path, capsys, **training) -> tuple[Path, Path]:
    out = tmp_path / "out"
    config = write_config(tmp_path, model, out, **training)
    code, err = rlvr(capsys, "train", config)
    assert code == 0, err
    return config, out


# --------------------------------------------------------------------------- checkpoints


def test_a_planted_sharded_optimizer_is_never_read_by_a_plain_run(tmp_path, tiny_model_dir, capsys):
    """Before: ``--resume`` of a one-process checkpoint with a planted ``optimizer/.metadata``
    unpickled it through torch.distributed.checkpoint (the payload ran)."""
    config, out = _train(tmp_path, tiny_model_dir, capsys)
    mark = tmp_path / PAYLOAD_MARK
    (out / "checkpoint-2" / "optimizer").mkdir()
    (out / "checkpoint-2" / "optimizer" / ".metadata").write_bytes(pickle.dumps(_Payload(mark)))
    code, err = rlvr(capsys, "train", config, "--resume", "--set", "training.max_steps=3")
    assert code == 0, err
    assert not mark.exists()


def test_a_planted_sharded_optimizer_is_refused_unrun(tmp_path, tiny_model_dir, capsys):
    """A checkpoint that looks sharded (no optimizer.pt; no manifest, as an older rlvr wrote)
    is read through the allow-list: the payload is named in one error line, never run."""
    config, out = _train(tmp_path, tiny_model_dir, capsys)
    ckpt = out / "checkpoint-2"
    (ckpt / "manifest.json").unlink()
    (ckpt / "optimizer.pt").unlink()
    (ckpt / "optimizer").mkdir()
    mark = tmp_path / PAYLOAD_MARK
    (ckpt / "optimizer" / ".metadata").write_bytes(pickle.dumps(_Payload(mark)))
    code, err = rlvr(capsys, "train", config, "--resume", "--set", "training.max_steps=3")
    assert code == 1
    [line] = error_lines(err)
    assert "optimizer/.metadata names io.open" in line and "refusing to load it" in line, line
    assert not mark.exists()


def test_the_sharded_optimizer_reader_reads_what_dcp_writes(tmp_path):
    """The allow-list covers a real DCP optimizer state (AdamW: tensors, step counters and
    param_groups with tuples, floats, bools and None): it loads back exactly."""
    from rlvr.parallel.distributed import load_sharded_optimizer, save_sharded_optimizer

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))

    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.9))
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    save_sharded_optimizer(model, optimizer, tmp_path / "optimizer")
    other = build()  # another run's copy of the model
    fresh = torch.optim.AdamW(other.parameters(), lr=5e-3)
    load_sharded_optimizer(other, fresh, tmp_path / "optimizer")
    saved, loaded = optimizer.state_dict(), fresh.state_dict()
    assert loaded["param_groups"] == saved["param_groups"]
    for i, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(loaded["state"][i][key], value), (i, key)


# --------------------------------------------------------------------------- trust_remote_code


@pytest.fixture
def remote_code_model(tmp_path, tiny_model_dir) -> tuple[Path, Path]:
    """The tiny model with a config class in its own Python file, which leaves a mark when
    it is imported."""
    model = tmp_path / "remote"
    shutil.copytree(tiny_model_dir, model)
    mark = tmp_path / PAYLOAD_MARK
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "configuration_mine.MineConfig",
        "AutoModelForCausalLM": "modeling_mine.MineForCausalLM",
    }
    (model / "config.json").write_text(json.dumps(config))
    (model / "configuration_mine.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n"
        "from transformers import Qwen2Config\n\n\nclass MineConfig(Qwen2Config):\n    pass\n"
    )
    (model / "modeling_mine.py").write_text(
        "from transformers import Qwen2ForCausalLM\n\nfrom .configuration_mine import MineConfig"
        "\n\n\nclass MineForCausalLM(Qwen2ForCausalLM):\n    config_class = MineConfig\n"
    )
    return model, mark


def _python_rlvr(tmp_path: Path, *args) -> subprocess.CompletedProcess:
    """``rlvr ARGS`` in a subprocess whose transformers copies remote code under tmp_path."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    cmd = [sys.executable, "-m", "rlvr", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def test_trust_remote_code_from_a_config_needs_the_flag(tmp_path, remote_code_model):
    """Before: ``model.trust_remote_code: true`` in a YAML made ``rlvr validate`` import the
    model directory's code."""
    model, mark = remote_code_model
    config = write_config(tmp_path, model, tmp_path / "out")
    raw = yaml.safe_load(config.read_text())
    raw["model"]["trust_remote_code"] = True
    config.write_text(yaml.safe_dump(raw))

    for command in ("validate", "train", "eval"):
        done = _python_rlvr(tmp_path, command, config)
        assert done.returncode == 1, done.stderr[-3000:]
        [line] = error_lines(done.stderr)
        assert "model.trust_remote_code: true runs the Python files of the model" in line
        assert "pass --trust-remote-code" in line, line
        assert not mark.exists(), command

    # Allowed, validate still checks without running the model's code; train runs it.
    done = _python_rlvr(tmp_path, "validate", config, "--trust-remote-code")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not mark.exists()
    done = _python_rlvr(tmp_path, "train", config, "--trust-remote-code")
    assert done.returncode == 0, done.stderr[-3000:]
    assert mark.exists()


# --------------------------------------------------------------------------- callable rewards


@pytest.fixture
def callable_config(tmp_path, tiny_model_dir) -> tuple[Path, Path]:
    """A config whose second reward is a TRL-style function in a file beside it, which leaves
    a mark when imported."""
    mark = tmp_path / PAYLOAD_MARK
    (tmp_path / "theirs.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n\n\n"
        "def reward(prompts, completions, **kwargs):\n    return [1.0 for _ in completions]\n"
    )
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "out")
    raw = yaml.safe_load(config.read_text())
    raw["rewards"].append(
        {"name": "callable", "label": "theirs", "params": {"function": "theirs.py:reward"}}
    )
    config.write_text(yaml.safe_dump(raw))
    return config, mark


def test_a_callable_reward_needs_allow_code(tmp_path, callable_config, capsys):
    """Before: a ``callable`` reward in someone else's config ran at ``train`` with no
    opt-in."""
    config, mark = callable_config
    rows = tmp_path / "completions.jsonl"
    rows.write_text(json.dumps({"prompt": "What is 1 + 1?", "completion": "2", "answer": "2"}))
    commands = {
        "train": ["train", config],
        "validate": ["validate", config],
        "eval": ["eval", config, "--limit", "1"],
        "rewards score": ["rewards", "score", "-c", config, "-i", rows, "-o", tmp_path / "o"],
    }
    for name, args in commands.items():
        code, err = rlvr(capsys, *args)
        assert code == 1, (name, err)
        [line] = error_lines(err)
        assert (
            "rewards[2] (callable 'theirs') imports and runs" in line
            and "theirs.py:reward" in line
            and "pass --allow-code" in line
        ), line
        assert not mark.exists(), name
    with pytest.raises(api.RlvrError, match="pass --allow-code to allow it"):
        api.validate(config)

    code, err = rlvr(
        capsys, "rewards", "score", "-c", config, "-i", rows, "-o", tmp_path / "o", "--allow-code"
    )
    assert code == 0, err
    assert mark.exists()
    code, err = rlvr(capsys, "train", config, "--allow-code")
    assert code == 0, err
    assert all(m["rewards/theirs/mean"] == 1.0 for m in read_metrics(tmp_path / "out"))
