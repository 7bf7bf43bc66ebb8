"""An environment package written outside rlvr, as the how-to page writes one: built into a
wheel, installed into a fresh venv, listed by ``rlvr plugins``, checked by ``rlvr env check``,
and trained by name from a config (multi-turn episodes on the tiny model, ``hf`` backend)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from turn_ending import turn_ending_policy

sys.path.insert(0, str(Path(__file__).parent))

from plugin_venv import build_and_install, make_venv, rlvr, run  # noqa: E402

pytestmark = pytest.mark.slow

PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "rlvr-guess"
version = "0.3.0"
dependencies = ["rlvr"]

[project.entry-points.rlvr]
guess = "rlvr_guess"

[tool.setuptools]
packages = ["rlvr_guess"]
"""

# The registration and the environment of docs/how-to/write-an-environment.md.
INIT = """
from rlvr.plugin import Environment, LazyFactory, Params, hookimpl


class GuessParams(Params):
    tries: int = 3


@hookimpl
def rlvr_register_environments(register):
    register(
        Environment(
            name="guess",
            params=GuessParams,
            factory=LazyFactory("rlvr_guess.env:GuessEnvironment"),
            description="guess the number, told higher or lower",
        )
    )
"""

ENV = '''
from typing import Any

from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo

from rlvr_guess import GuessParams


class GuessEnvironment:
    """The model guesses the row's number; it is told 'higher' or 'lower'."""

    def __init__(self, params: GuessParams, run: RunInfo):
        self.params = params

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        return EpisodeStart(messages=prompt, state={"target": int(row["answer"]), "tries": 0})

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        state["tries"] += 1
        guess = message["content"].strip()
        if guess == str(state["target"]):
            return EnvResponse(done=True, rewards={"solved": 1.0})
        if state["tries"] >= self.params.tries:
            return EnvResponse(done=True)
        hint = "higher" if guess.isdigit() and int(guess) < state["target"] else "lower"
        return EnvResponse(messages=[{"role": "user", "content": hint}])

    async def close(self, state: Any) -> None:
        pass
'''


def write_package(root: Path) -> Path:
    package = root / "rlvr-guess"
    (package / "rlvr_guess").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "rlvr_guess" / "__init__.py").write_text(textwrap.dedent(INIT))
    (package / "rlvr_guess" / "env.py").write_text(textwrap.dedent(ENV))
    return package


def turn_ending_model(tiny_model_dir: Path, out: Path) -> Path:
    """The tiny model, saved with its end-of-turn token pushed along the mean hidden state of a
    prompt, so that it ends its turns within a few tokens (a random model almost never does,
    and its episodes would be one truncated turn)."""
    model, tok = turn_ending_policy(tiny_model_dir, "Guess my number between 1 and 9.")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_an_environment_package_installs_checks_and_trains(tmp_path, tiny_model_dir):
    python = make_venv(tmp_path)
    build_and_install(python, write_package(tmp_path / "src"), tmp_path)

    listing = json.loads(rlvr(python, "plugins", "--json"))
    assert listing["failures"] == []
    (plugin,) = [p for p in listing["plugins"] if p["dist"] == "rlvr-guess"]
    assert plugin["version"] == "0.3.0"
    assert [(r["kind"], r["name"]) for r in plugin["registers"]] == [("environment", "guess")]

    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "\n".join(
            json.dumps({"prompt": "Guess my number between 1 and 9.", "answer": str(n)})
            for n in (3, 7, 5, 2)
        )
    )
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(["5", "3"]))
    out = rlvr(python, "env", "check", "guess", "--script", script, "--data", rows)
    assert "environment 'guess' (rlvr-guess): GuessParams(tries=3)" in out
    assert "conformance: OK" in out
    # row 0 (3): "5" is told "lower" (environment tokens, masked), then "3" solves it
    episode = out.split("--- episode 0 (row 0)")[1].split("--- episode 1")[0]
    assert "loss mask 0: masked" in episode and "lower" in episode
    assert "environment rewards: solved=1" in episode and "turns: 2" in episode
    episode = out.split("--- episode 1 (row 1)")[1]
    assert "environment rewards: none" in episode  # 7: "5" then "3", both wrong

    model = turn_ending_model(tiny_model_dir, tmp_path / "model")
    config = {
        "model": {"name_or_path": str(model)},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "environment": {"name": "guess", "params": {"tries": 3}, "max_turns": 3},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 8,
            "logging_steps": 1,
            "save_steps": 100,
            "report_to": [],
        },
    }
    path = tmp_path / "guess.yaml"
    path.write_text(yaml.safe_dump(config))
    run(python, "-m", "rlvr", "train", path, cwd=tmp_path)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    steps = [m for m in metrics if "env/episodes" in m]
    assert len(steps) == 2 and all(m["env/episodes"] == 4 and m["env/failed"] == 0 for m in steps)
    assert max(m["env/turns_mean"] for m in steps) > 1  # multi-turn: the environment answered
    assert max(m["env/env_token_frac"] for m in steps) > 0
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    hints = [m["content"] for s in samples for m in s["transcript"] if m["role"] == "user"]
    assert {"higher", "lower"} & set(hints)
