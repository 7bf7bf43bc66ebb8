"""#35 item 13, the config and data part: a quoted ``--set`` value became a float; a ``--set``
on one reward param moved the relative ``callable`` path written in the file to the cwd; a
prompt field of the wrong type passed ``validate`` and failed in ``train``; a non-UTF-8 data
file was reported without its line."""

from __future__ import annotations

import json

import yaml

from rlvr.cli.main import main


def _validated(capsys, *args: str) -> dict:
    assert main(["validate", "--allow-code", "--print", *args]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


def test_a_quoted_set_value_stays_a_string(write_run, capsys):
    config = str(write_run())
    got = _validated(capsys, config, "--set", 'rewards[0].label="1e3"')
    assert got["rewards"][0]["label"] == "1e3"
    got = _validated(capsys, config, "--set", "rewards[0].label='2e5'")
    assert got["rewards"][0]["label"] == "2e5"
    got = _validated(capsys, config, "--set", "training.learning_rate=1e-4")  # YAML 1.1: a str
    assert got["training"]["learning_rate"] == 1e-4


def test_a_set_on_one_reward_param_keeps_the_files_paths_where_the_file_put_them(
    write_run, tmp_path, monkeypatch, capsys
):
    config = write_run()  # rewards[0].params.function: rewards.py:digits, beside the file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    got = _validated(capsys, str(config), "--set", "rewards[0].params.format=standard")
    params = got["rewards"][0]["params"]
    assert params["format"] == "standard"
    assert params["function"] == f"{tmp_path / 'rewards.py'}:digits"
    # The path given with --set resolves against the current directory, as core paths do.
    (elsewhere / "mine.py").write_text("def f(prompts, completions, **kwargs):\n    return []\n")
    got = _validated(capsys, str(config), "--set", "rewards[0].params.function=mine.py:f")
    assert got["rewards"][0]["params"]["function"] == f"{elsewhere / 'mine.py'}:f"


def test_validate_reports_a_prompt_field_of_the_wrong_type(write_run, capsys):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": 7, "answer": "7"}]
    assert main(["validate", "--allow-code", str(write_run(rows=rows))]) == 2
    err = capsys.readouterr().err
    assert "  data.prompt_field: " in err
    assert "'prompt'" in err and "1 of 2 rows" in err and "int" in err


def test_a_non_utf8_data_file_is_reported_with_its_line(write_run, capsys):
    config = write_run()
    data = config.parent / "rows.jsonl"
    lines = data.read_bytes().splitlines(keepends=True)
    lines[2] = json.dumps({"prompt": "caf\u00e9", "answer": "1"}).encode("latin-1") + b"\n"
    lines[2] = lines[2].replace(b"\\u00e9", b"\xe9")  # the é as Latin-1: not UTF-8
    data.write_bytes(b"".join(lines))
    assert main(["validate", "--allow-code", str(config)]) == 2
    err = capsys.readouterr().err
    assert "is not UTF-8 text" in err and "line 3" in err, err
