"""`rlvr validate` and `rlvr train` run the same pre-flight and report every problem at once,
before any weights load; relative paths in a config file resolve against the file's directory."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.cli.main import main

HAS_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _rows(path: Path, **fields: str) -> Path:
    return _write(path, json.dumps(fields) + "\n")


def test_every_preflight_problem_at_once_before_any_weights_load(tmp_path, capsys, monkeypatch):
    _rows(tmp_path / "cfg" / "data.jsonl", prompt="What is 1 + 1?", solution="2")
    config = _write(
        tmp_path / "cfg" / "run.yaml",
        "model: {name_or_path: ./no-such-model}\n"
        "data: {path: data.jsonl, prompt_field: question, eval_path: missing.jsonl}\n"
        "rewards: [{name: answer}]\n"
        "training: {report_to: wandb, output_dir: out}\n",
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    cfg = tmp_path / "cfg"
    assert f"model.name_or_path: model path '{cfg / 'no-such-model'}' does not exist" in err
    assert f"data.eval_path: '{cfg / 'missing.jsonl'}' does not exist" in err
    assert "data.prompt_field: field 'question' needed by the prompt" in err
    assert "(columns: prompt, solution)" in err
    assert "rewards[0]: field 'answer' needed by reward 'answer'" in err
    assert ("training.report_to" in err) is not HAS_WANDB

    # train reports the same problems, and loads no weights and writes nothing first.
    import rlvr.model.loading

    def no_loading(*args, **kwargs):
        raise AssertionError("weights loaded before the pre-flight problems were reported")

    monkeypatch.setattr(rlvr.model.loading, "load_policy", no_loading)
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == err.splitlines()[1:]
    assert not (cfg / "out").exists()


def test_missing_data_file_shows_the_absolute_path(tmp_path, capsys, model_dir):
    config = _write(
        tmp_path / "c.yaml",
        f"model: {{name_or_path: {model_dir}}}\ndata: {{path: nope/train.jsonl}}\n"
        "rewards: [{name: format}]\n",
    )
    assert main(["validate", str(config)]) == 2
    assert f"data.path: '{tmp_path / 'nope' / 'train.jsonl'}' does not exist" in (
        capsys.readouterr().err
    )


def test_relative_paths_resolve_against_the_config_file(tmp_path, capsys, monkeypatch, model_dir):
    _rows(tmp_path / "proj" / "data" / "train.jsonl", prompt="What is 1 + 1?", answer="2")
    config = _write(
        tmp_path / "proj" / "configs" / "run.yaml",
        f"model: {{name_or_path: {model_dir}}}\n"
        "data: {path: ../data/train.jsonl}\n"
        "rewards: [{name: answer}, {name: callable, params: {function: 'mine.py:fn'}}]\n"
        "training: {output_dir: ../outputs/run}\n",
    )
    _write(config.parent / "mine.py", "def fn(completions, **kwargs):\n    return [1.0]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the config's directory
    assert main(["validate", str(config), "--print", "--allow-code"]) == 0
    out = capsys.readouterr().out
    assert f"path: {tmp_path / 'proj' / 'data' / 'train.jsonl'}" in out
    assert f"output_dir: {tmp_path / 'proj' / 'outputs' / 'run'}" in out
    assert f"function: {config.parent / 'mine.py'}:fn" in out  # a plugin's path param too

    # --set paths resolve against the current directory, and say where they came from.
    _rows(elsewhere / "mine.jsonl", prompt="What is 2 + 2?", answer="4")
    args = ["--allow-code", "--set", "data.path=mine.jsonl", "--print"]
    assert main(["validate", str(config), *args]) == 0
    assert f"path: {elsewhere / 'mine.jsonl'}" in capsys.readouterr().out
    assert main(["validate", str(config), "--allow-code", "--set", "data.path=other.jsonl"]) == 2
    err = capsys.readouterr().err
    assert f"'{elsewhere / 'other.jsonl'}' does not exist (from --set data.path=other.jsonl)" in err


def test_a_typo_in_a_local_model_path_is_not_taken_for_a_hub_id(tmp_path, capsys, model_dir):
    """``models/tiny-arithm`` beside a ``models/`` directory: reported at once with the near
    miss, where a hub id would wait on the network first."""
    import shutil

    shutil.copytree(model_dir, tmp_path / "models" / "tiny-arith")
    _rows(tmp_path / "rows.jsonl", prompt="What is 1 + 1?", answer="2")
    config = _write(
        tmp_path / "run.yaml",
        "model: {name_or_path: models/tiny-arithm}\n"
        "data: {path: rows.jsonl}\nrewards: [{name: answer}]\n",
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"model path '{tmp_path / 'models' / 'tiny-arithm'}' does not exist" in err
    assert f"did you mean '{tmp_path / 'models' / 'tiny-arith'}'?" in err
    assert "hub" not in err
