"""The ``rlvr`` command line is one shape for every command: the config as ``CONFIG`` (or
``-c CONFIG``) everywhere, ``-v`` anywhere on the line, help with descriptions and defaults,
``validate`` ending in one OK line, and output cut short by ``| head`` without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli.main import main, parse_args


@pytest.fixture
def config(tmp_path, train_sections):
    path = tmp_path / "run.yaml"
    path.write_text(train_sections + "rewards: [{name: numbers}]\ntraining: {reward_workers: 0}\n")
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "c.yaml"],
        ["validate", "c.yaml"],
        ["eval", "c.yaml"],
        ["rewards", "score", "c.yaml", "-i", "in.jsonl", "-o", "out.jsonl"],
    ],
)
def test_every_command_takes_the_config_the_same_way_and_v_anywhere(argv, capsys):
    positional = parse_args(argv)
    assert positional.config == "c.yaml" and positional.verbose is False
    flagged = [*argv[:-5], *argv[-4:]] if argv[0] == "rewards" else argv[:-1]
    flagged = [*flagged, "-c", "c.yaml"]
    assert parse_args(flagged).config == "c.yaml"  # the old `rewards score -c` too
    assert parse_args([*argv, "-v"]).verbose is True
    assert parse_args(["-v", *argv]).verbose is True
    assert parse_args([*argv[:1], "--verbose", *argv[1:]]).verbose is True
    with pytest.raises(SystemExit):
        parse_args([*argv, "-c", "other.yaml"])
    assert "give the run config once (got twice)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args([a for a in argv if a != "c.yaml"])
    assert "give the run config once (got none)" in capsys.readouterr().err


def test_rewards_score_with_a_positional_config(config, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"completion": "#### 2", "answer": "2"}) + "\n")
    out = tmp_path / "scored.jsonl"
    assert main(["rewards", "score", str(config), "-i", str(rows), "-o", str(out), "-v"]) == 0
    assert json.loads(out.read_text())["rewards"]["numbers"] == 1.0


def test_subcommand_help_has_a_description_and_the_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "Generate on an eval split and score it (accuracy, pass@k)." in text
    assert "which the result names" in text  # the description, not only the one-line help
    assert "(default: 1)" in text  # -k
    assert "(default: None)" not in text and "(default: False)" not in text
    with pytest.raises(SystemExit):
        main(["rewards", "score", "--help"])
    text = capsys.readouterr().out
    assert "Scores each row's `completion`" in text and "(default: 256)" in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "rlvr COMMAND --help" in capsys.readouterr().out


def test_validate_ends_with_one_ok_line_and_prints_the_config_when_asked(config, capsys):
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert out == f"OK: {config} is valid for rlvr train\n"
    assert main(["validate", str(config), "--print"]) == 0
    captured = capsys.readouterr()
    assert "name: grpo" in captured.out and "reward_workers: 0" in captured.out
    assert "OK:" not in captured.out  # stdout is the YAML alone: `--print > resolved.yaml`
    assert captured.err.endswith(f"OK: {config} is valid for rlvr train\n")


@pytest.mark.parametrize("argv", [["schema"], ["plugins"]])
def test_output_cut_short_by_a_closed_pipe_ends_quietly(argv):
    """`rlvr schema | head -1`: the reader is gone before rlvr writes; no BrokenPipeError."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `head` exits: every write of rlvr's meets a closed pipe
    err = proc.stderr.read()
    code = proc.wait(timeout=120)
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
    assert code in (0, 141)


WARNS = """
import warnings
from rlvr.api.errors import ConfigWarning
from rlvr.cli.main import show_warnings

show_warnings(verbose={verbose})
third_party = {{"__name__": "transformers.modeling_utils"}}  # code of another package
exec(
    "import warnings\\n"
    "warnings.warn('`is_gradient_checkpointing` is deprecated', FutureWarning)\\n"
    "warnings.warn('TypedStorage is deprecated', UserWarning)\\n",
    third_party,
)
mine = {{"__name__": "rlvr.model.loading"}}
exec("import warnings\\nwarnings.warn('could not cache the dense copy', UserWarning)\\n", mine)
warnings.warn("training.bf16 is ignored", ConfigWarning)
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_third_party_warnings_only_with_v(verbose):
    code = WARNS.format(verbose=verbose)
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    assert "could not cache the dense copy" in err  # rlvr's own warnings, always
    assert "training.bf16 is ignored" in err
    for third in ("is_gradient_checkpointing", "TypedStorage"):
        assert (third in err) is verbose, err


#: Prints the command's exit code and whether it imported torch, transformers or datasets.
_IMPORTS = (
    "import sys; from rlvr.cli.main import main; code = main(sys.argv[1:]); "
    "print(code, sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "{config}"], "already holds a run (checkpoint-1); pass --resume"),
        (["validate", "{config}"], "already holds a run (checkpoint-1); pass --resume"),
        (["train", "{config}", "--resume", "--set", "training.output_dir={empty}"], "--resume:"),
        (["train", "{code}"], "pass --allow-code to allow it"),
        (["validate", "{code}"], "pass --allow-code to allow it"),
        (["eval", "{code}"], "pass --allow-code to allow it"),
        (["train", "{config}", "--set", "training.seed=\x01"], "unacceptable character"),
    ],
    ids=[
        "run-dir",
        "validate-run-dir",
        "resume-nothing",
        "allow-code",
        "validate-allow-code",
        "eval-allow-code",
        "set-value",
    ],
)
def test_config_errors_come_before_torch_loads(argv, message, tmp_path, train_sections):
    """#45 item 12: these took 10-20 s on a loaded machine, importing torch and transformers
    before a check that needs neither."""
    out = tmp_path / "out"
    (out / "checkpoint-1").mkdir(parents=True)
    (out / "checkpoint-1" / "COMPLETE").write_text("")
    (tmp_path / "empty").mkdir()
    config = tmp_path / "run.yaml"
    config.write_text(
        train_sections + f"rewards: [{{name: numbers}}]\ntraining: {{output_dir: {out}}}\n"
    )
    code = tmp_path / "code.yaml"
    code.write_text(train_sections + "rewards: [{name: callable, params: {function: 'r.py:f'}}]\n")
    (tmp_path / "r.py").write_text("def f(prompts, completions, **kw):\n    return [1.0]\n")
    paths = {"config": config, "code": code, "empty": tmp_path / "empty"}
    args = [a.format(**paths) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS, *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    exit_code, imported = done.stdout.split(" ", 1)
    assert exit_code in ("1", "2") and imported.strip() == "[]", done.stdout


def test_the_readme_says_what_validate_prints(config, capsys):
    """#43 item 8: the README said `rlvr validate` prints the resolved config; it prints one OK
    line, and the config only with --print."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    (claim,) = [p for p in readme.split("\n\n") if p.startswith("`rlvr validate run.yaml`")]
    claim = " ".join(claim.split())
    assert "prints one `OK` line, or every problem at once" in claim
    assert "`--print` prints the config resolved, every default filled in" in claim
    assert main(["validate", str(config)]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith("OK: ") and "training:" not in plain  # no config without --print
    assert main(["validate", str(config), "--print"]) == 0
    printed = capsys.readouterr().out
    assert "training:" in printed and "reward_workers: 0" in printed  # every default filled in
    assert "learning_rate: 1.0e-06" in printed  # a default the file left out
