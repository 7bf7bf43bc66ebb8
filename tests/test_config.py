"""Config loading: schema from the registry, errors with paths, overrides, cross-checks."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from pydantic import Field

from rlvr.api.host import create_host
from rlvr.api.registration import Algorithm, Backend, Capabilities, Params, Requirements, Reward
from rlvr.cli.main import main
from rlvr.config.schema import ConfigError, apply_overrides, json_schema, load_config
from rlvr.plugin import hookimpl


class ToleranceParams(Params):
    tolerance: float = Field(1e-6, ge=0)
    position: str = "last"


class NeedsParams(Params):
    function: str


class GroupParams(Params):
    beta: float = 0.0
    epsilon: float = 0.2


class FileParams(Params):
    path: str = "x.jsonl"


class Plugin:
    """Records for the tests: a reward, a group algorithm, and two backends."""

    @hookimpl
    def rlvr_register_rewards(self, register):
        register(Reward(name="numbers", params=ToleranceParams, factory=dict, description="n"))
        register(Reward(name="format", params=Params, factory=dict, description="f"))
        register(Reward(name="needs", params=NeedsParams, factory=dict, description="n"))

    @hookimpl
    def rlvr_register_algorithms(self, register):
        register(
            Algorithm(
                name="grpo",
                params=GroupParams,
                factory=dict,
                description="g",
                requirements=lambda p: Requirements(
                    reference_model=p.beta > 0, reference_model_param="beta", min_group_size=2
                ),
            )
        )

    @hookimpl
    def rlvr_register_backends(self, register):
        register(Backend(name="hf", params=Params, factory=dict, description="h"))
        register(
            Backend(
                name="replay",
                params=FileParams,
                factory=dict,
                description="r",
                capabilities=Capabilities(reference_logprobs=False),
                available=lambda: None,
            )
        )
        register(
            Backend(
                name="missing",
                params=Params,
                factory=dict,
                description="m",
                available=lambda: "needs the `zz` package: pip install 'rlvr[zz]'",
            )
        )

    @hookimpl
    def rlvr_validate_config(self, config):
        if config.training.max_completion_length > 4096:
            return [("training.max_completion_length", "too long for the tests' plugin")]
        return None


@pytest.fixture
def host():
    return create_host(entrypoints=False, plugins=[Plugin()])


def problems(data, host, **kw):
    with pytest.raises(ConfigError) as info:
        load_config(data, host, **kw)
    return dict(info.value.problems)


def test_valid_config_fills_defaults(host):
    config = load_config({"rewards": [{"name": "numbers"}]}, host)
    (entry,) = config.rewards
    assert entry.params.tolerance == 1e-6 and entry.weight == 1.0 and entry.key == "numbers"
    assert config.training.num_generations == 8 and config.algorithm is None


def test_all_errors_at_once_with_paths_and_did_you_mean(host):
    data = {
        "rewards": [
            {"name": "numbers", "params": {"tolerance": -1}},
            {"name": "numbrs"},
            {"name": "numbers", "params": {"tolerence": 0.1}},
        ],
        "training": {"learning_rate": "fast"},
        "trainig": {},
    }
    found = problems(data, host)
    assert found["rewards[0].params.tolerance"] == "-1 is not >= 0"  # echoes the bad value
    assert "did you mean 'numbers'" in found["rewards[1].name"]
    assert "Available: format, needs, numbers" in found["rewards[1].name"]
    assert "did you mean 'tolerance'" in found["rewards[2].params.tolerence"]
    assert "? -- valid keys: tolerance, position" in found["rewards[2].params.tolerence"]
    assert "(got 'fast')" in found["training.learning_rate"]
    assert "did you mean 'training'" in found["trainig"]


def test_required_params_are_reported_at_their_path(host):
    found = problems({"rewards": [{"name": "format"}, {"name": "needs"}]}, host)
    assert found == {"rewards[1].params": "required field is missing: this plugin needs function"}
    found = problems({"rewards": [{"name": "needs", "params": {}}]}, host)
    assert "required field is missing" in found["rewards[0].params.function"]


def test_required_sections_and_defaults(host):
    found = problems({"rewards": [{"name": "format"}]}, host, require=("model", "rewards"))
    assert "needs a `model:` section" in found["model"]
    config = load_config({}, host, require=("algorithm", "backend"))
    assert config.algorithm.name == "grpo" and config.backend.name == "hf"


def test_duplicate_labels_rejected(host):
    data = {"rewards": [{"name": "format"}, {"name": "format"}]}
    assert "distinct `label`" in problems(data, host)["rewards[1].label"]
    data["rewards"][1]["label"] = "format_again"
    assert [e.key for e in load_config(data, host).rewards] == ["format", "format_again"]


def test_cross_plugin_checks(host):
    base = {"algorithm": {"name": "grpo", "params": {"beta": 0.04}}, "backend": {"name": "replay"}}
    found = problems({**base, "training": {"num_generations": 1}}, host)
    assert "at least 2 per prompt" in found["training.num_generations"]
    assert "set algorithm.params.beta: 0" in found["algorithm.params.beta"]
    found = problems({"backend": {"name": "missing"}}, host)
    assert "pip install" in found["backend.name"]
    found = problems({"training": {"max_completion_length": 5000}}, host)
    assert "tests' plugin" in found["training.max_completion_length"]


def test_trl_block_pastes_into_training(host):
    data = {
        "algorithm": {"name": "grpo"},
        "training": {"beta": 0.1, "bf16": True, "learning_rate": 1e-5, "use_vllm": False},
    }
    with pytest.warns(UserWarning, match="bf16 is ignored"):
        config = load_config(data, host)
    assert config.algorithm.params.beta == 0.1 and config.training.learning_rate == 1e-5
    data = {"algorithm": {"name": "grpo", "params": {"beta": 0.2}}, "training": {"beta": 0.1}}
    assert "keep only one" in problems(data, host)["training.beta"]
    # TRL's reward_weights: the message spells out the rlvr entries (not "did you mean
    # reward_workers", and never dropped: the weights would be lost).
    data = {"rewards": [{"name": "answer"}, {"name": "format"}]}
    data["training"] = {"reward_weights": [1.0, 0.5]}
    assert problems(data, host)["training.reward_weights"] == (
        "rlvr weighs each rewards[] entry on its own: "
        "set rewards[0].weight: 1.0, rewards[1].weight: 0.5"
    )


def test_a_key_of_another_plugin_names_that_plugin():
    """The fix for dapo's dynamic_sampling under grpo is the algorithm's name, not the key."""
    host = create_host()  # the built-ins
    data = {"algorithm": {"name": "grpo", "params": {"dynamic_sampling": True}}}
    msg = problems(data, host)["algorithm.params.dynamic_sampling"]
    assert msg.startswith(
        "unknown key 'dynamic_sampling'; it is a param of dapo and vapo (set algorithm.name: dapo)"
        " -- valid keys: epsilon,"
    )
    data = {"backend": {"name": "hf", "params": {"gpu_memory_utilization": 0.5}}}
    msg = problems(data, host)["backend.params.gpu_memory_utilization"]
    assert "; it is a param of vllm (set backend.name: vllm) -- valid keys" in msg
    data = {"rewards": [{"name": "answer", "params": {"tolerance": 0.01}}]}
    msg = problems(data, host)["rewards[0].params.tolerance"]
    assert "; it is a param of the numbers and length_penalty rewards -- valid keys" in msg
    # A near-miss of the plugin's own key keeps its did-you-mean alone.
    data = {"algorithm": {"name": "grpo", "params": {"epsilonn": 0.2}}}
    msg = problems(data, host)["algorithm.params.epsilonn"]
    assert "did you mean 'epsilon'" in msg and "param of" not in msg


def test_max_steps_is_a_count_or_minus_one(host):
    assert load_config({"training": {"max_steps": -1}}, host).training.max_steps == -1
    # An empty output_dir (`--set training.output_dir=`) would write the run into the cwd.
    assert (
        "at least 1 character"
        in problems({"training": {"output_dir": ""}}, host)["training.output_dir"]
    )
    for bad in (0, -5):
        msg = problems({"training": {"max_steps": bad}}, host)["training.max_steps"]
        assert msg.startswith(f"{bad} is no step count; give the number of steps")


def test_overrides():
    data = {"rewards": [{"name": "a"}, {"name": "b", "weight": 1}], "training": {}}
    apply_overrides(data, ["rewards[1].weight=0.5", "training.seed=7", "model.name_or_path=x"])
    assert data["rewards"][1]["weight"] == 0.5
    assert data["training"]["seed"] == 7 and data["model"] == {"name_or_path": "x"}
    apply_overrides(data, ["rewards.0.params.tolerance=1e-3"])
    assert data["rewards"][0]["params"]["tolerance"] == 1e-3
    with pytest.raises(ConfigError, match="no list item"):
        apply_overrides(data, ["rewards.5.weight=1"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides(data, ["training.seed"])


def test_yaml_and_toml_files(tmp_path, host):
    (tmp_path / "c.yaml").write_text("rewards:\n  - name: numbers\n    weight: 2\n")
    (tmp_path / "c.toml").write_text('[[rewards]]\nname = "numbers"\nweight = 2\n')
    for name in ("c.yaml", "c.toml"):
        assert load_config(tmp_path / name, host).rewards[0].weight == 2
    (tmp_path / "bad.yaml").write_text("rewards: [\n")
    parse = problems(tmp_path / "bad.yaml", host)[""]
    assert parse.startswith("cannot parse bad.yaml") and "in bad.yaml, line 2" in parse
    # `training:` with every key commented out is the defaults, not "an instance of a class".
    (tmp_path / "empty.yaml").write_text("rewards: [{name: numbers}]\ntraining:\n")
    assert load_config(tmp_path / "empty.yaml", host).training.max_steps == -1
    (tmp_path / "name.yaml").write_text("model: {name: m}\n")  # a prefix of the real key
    assert "did you mean 'name_or_path'?" in problems(tmp_path / "name.yaml", host)["model.name"]
    (tmp_path / "lora.yaml").write_text("model: {name_or_path: m, lora: true}\n")
    assert problems(tmp_path / "lora.yaml", host)["model.lora"] == (
        "must be a mapping of settings, e.g. {key: value} (got True)"
    )
    assert "does not exist" in problems(tmp_path / "nope.yaml", host)[""]


def _alias_bomb(levels: int) -> str:
    """``data.chat_template_kwargs`` holding nine aliases of nine aliases, ``levels`` deep."""
    lines = ["    a: &a [x, x, x, x, x, x, x, x, x]"]
    names = "abcdefghijklmnop"
    for prev, name in zip(names, names[1 : levels + 1], strict=False):
        lines.append(f"    {name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    return "data:\n  chat_template_kwargs:\n" + "\n".join(lines) + "\nrewards: [{name: numbers}]\n"


def test_an_alias_bomb_is_refused_when_the_file_is_read(tmp_path, host, capsys):
    """Issue 45 item 23: 8 levels expand to 43 million values; refused in milliseconds, before
    validation walks (and train's chat template copies) the expansion."""
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(8))
    start = time.perf_counter()
    found = problems(path, host)[""]
    assert time.perf_counter() - start < 1.0
    assert found.startswith("cannot parse bomb.yaml: its aliases (*name) expand to more than")
    assert "alias bomb" in found
    # Aliases that stay small are fine, and so is a large config written out.
    (tmp_path / "small.yaml").write_text(_alias_bomb(2))
    kwargs = load_config(tmp_path / "small.yaml", host).data.chat_template_kwargs
    assert len(kwargs["c"]) == 9 and kwargs["c"][0][0] == ["x"] * 9
    # ... and one that refers to itself is refused, not built as an endless value.
    (tmp_path / "loop.yaml").write_text("data: {chat_template_kwargs: {a: &a [1, *a]}}\n")
    assert "refers to the value that contains it" in problems(tmp_path / "loop.yaml", host)[""]
    # The same bound holds for a --set value, and the command prints the problem, no traceback.
    flow = (
        "{a: &a [1,1,1,1,1,1,1,1,1,1], "
        + ", ".join(
            f"{n}: &{n} [{','.join([f'*{p}'] * 10)}]" for p, n in zip("abcde", "bcdef", strict=True)
        )
        + "}"
    )
    assert (
        "alias bomb"
        in problems(
            {"rewards": [{"name": "numbers"}]},
            host,
            overrides=[f"data.chat_template_kwargs={flow}"],
        )["data.chat_template_kwargs"]
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "alias bomb" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("\x01", "unacceptable character #x0001"),
        ("1" * 5000, "an integer has more digits than Python reads (4,300)"),
        ("!!python/object/apply:os.system [echo hi]", "could not determine a constructor"),
    ],
    ids=["control-character", "5000-digit-int", "python-tag"],
)
def test_set_values_yaml_refuses_are_one_problem(
    value, why, host, train_sections, tmp_path, capsys
):
    """Issue 45 item 24: each was a raw traceback from `rlvr validate --set`."""
    found = problems({"rewards": [{"name": "numbers"}]}, host, overrides=[f"training.seed={value}"])
    assert found["training.seed"].startswith("cannot read the value ")
    assert found["training.seed"].endswith(why) or why in found["training.seed"]
    assert "(from --set)" in found["training.seed"]
    path = tmp_path / "c.yaml"
    path.write_text(train_sections + "rewards:\n  - name: answer\n")
    assert main(["validate", str(path), "--set", f"training.seed={value}"]) == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err and len(err) < 600


def test_a_file_with_a_huge_integer_is_one_problem(tmp_path, host):
    (tmp_path / "big.yaml").write_text(f"training: {{seed: {'9' * 5000}}}\n")
    assert "more digits than Python reads" in problems(tmp_path / "big.yaml", host)[""]
    (tmp_path / "big.toml").write_text(f"[training]\nseed = {'9' * 5000}\n")
    assert problems(tmp_path / "big.toml", host)[""].startswith("cannot parse big.toml")
    with pytest.raises(ConfigError, match="no list item"):
        apply_overrides({"rewards": [{}]}, [f"rewards.{'1' * 5000}.weight=1"])


def test_json_schema_is_a_union_on_name(host):
    schema = json_schema(host)
    text = json.dumps(schema)
    assert "tolerance" in text and "discriminator" in text


def test_validate_command(tmp_path, capsys, train_sections):
    path = tmp_path / "c.yaml"
    path.write_text(train_sections + "rewards:\n  - name: answer\n")
    assert main(["validate", str(path), "--set", "rewards[0].weight=3", "--print"]) == 0
    out = capsys.readouterr().out
    assert "weight: 3" in out and "correct:" in out  # resolved, params defaults filled in
    assert "name: grpo" in out and "name: hf" in out  # train's default algorithm and backend
    # ... and their rules: grpo needs a group, though the config names no algorithm.
    assert main(["validate", str(path), "--set", "training.num_generations=1"]) == 2
    assert "grpo compares completions of the same prompt" in capsys.readouterr().err
    path.write_text(train_sections + "rewards:\n  - name: anser\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "rewards[0].name" in err and "did you mean 'answer'" in err
    # A section train needs is a problem for validate too, reported with the others.
    path.write_text("rewards:\n  - name: anser\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "3 problems" in err and "model: this command needs a `model:` section" in err
    assert main(["schema"]) == 0
    assert "length_penalty" in capsys.readouterr().out


def test_each_entry_reports_its_own_problems(tmp_path, capsys, train_sections):
    """One plugin entry's failure never hides another's, and each problem has its own path."""
    path = tmp_path / "c.yaml"
    path.write_text(
        train_sections + "rewards:\n"
        "  - {name: anwser}\n"
        "  - {name: format, params: {no_such_param: 3}}\n"
        "  - {name: length_penalty, weight: heavy}\n"
    )
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("4 problems in the config:")
    assert lines[1].startswith("  rewards[0].name: unknown reward 'anwser'; did you mean 'answer'")
    assert lines[2].startswith("  rewards[1].params.no_such_param: unknown key 'no_such_param'")
    assert lines[3] == "  rewards[2].params: mode 'overlong' needs max_length and buffer"
    assert lines[4].startswith("  rewards[2].weight: ") and lines[4].endswith("(got 'heavy')")


def test_messages_echo_values_and_name_the_override(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("rewards: [{name: answer}]\ntraining: {learning_rate: -1, bf16: true}\n")
    assert (
        main(["validate", str(path), "--set", "training.seed=x", "--set", "rewards.0.wieght=2"])
        == 2
    )
    err = capsys.readouterr().err
    # A TRL-compat drop is one line, with no source location.
    assert "warning: training.bf16 is ignored: rlvr picks bf16" in err
    assert "config.py" not in err and "UserWarning" not in err
    assert "  training.learning_rate: -1 is not > 0\n" in err  # from the file: no origin
    assert "training.seed: " in err and "(got 'x') (from --set training.seed=x)" in err
    assert (
        "rewards[0].wieght: unknown key 'wieght'; did you mean 'weight'? -- valid keys: name, "
    ) in err
    (line,) = [x for x in err.splitlines() if x.startswith("  rewards[0].wieght")]
    assert line.endswith("(from --set rewards.0.wieght=2)")
    # A problem above the overridden key (its misspelt section) names the override too.
    assert main(["validate", str(path), "--set", "traning.seed=1"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("  traning:")]
    assert "did you mean 'training'?" in line and line.endswith("(from --set traning.seed=1)")


def test_eval_steps_is_a_setting_and_trl_eval_strategy_keeps_its_meaning(host):
    config = load_config({"training": {"eval_steps": 50, "eval_strategy": "steps"}}, host)
    assert config.training.eval_steps == 50
    assert "eval_strategy" not in config.training.model_dump()
    # TRL's eval_strategy: steps without eval_steps evaluates every logging_steps
    config = load_config({"training": {"logging_steps": 5, "eval_strategy": "steps"}}, host)
    assert config.training.eval_steps == 5
    found = problems({"training": {"eval_steps": 50, "eval_strategy": "no"}}, host)
    msg = found["training.eval_strategy"]
    assert "turns evaluation off but training.eval_steps turns it on" in msg
    found = problems({"training": {"eval_strategy": "epoch", "save_strategy": "epoch"}}, host)
    assert "rlvr evaluates every training.eval_steps" in found["training.eval_strategy"]
    assert "rlvr saves every training.save_steps" in found["training.save_strategy"]


def test_settings_that_cannot_learn_warn(host):
    group = {"algorithm": {"name": "grpo"}}
    with pytest.warns(UserWarning, match="samples greedily"):
        load_config({**group, "training": {"temperature": 0}}, host)
    with pytest.warns(UserWarning, match="every reward has weight 0"):
        load_config({"rewards": [{"name": "format", "weight": 0}]}, host)
    with pytest.warns(UserWarning, match="warmup_steps: 200 >= max_steps 200: the learning"):
        load_config({"training": {"warmup_steps": 200, "max_steps": 200}}, host)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a config that can learn: no warning
        load_config({**group, "rewards": [{"name": "format"}]}, host)
        load_config({"training": {"warmup_steps": 199, "max_steps": 200}}, host)
        # an environment's own rewards train; a weight-0 reward beside them is only logged
        from rlvr.api.host import create_host

        env = {"name": "tools", "params": {"tools": ["calculator"]}}
        zero = {"environment": env, "rewards": [{"name": "format", "weight": 0}]}
        load_config(zero, create_host())


def test_commands_that_do_not_train_do_not_warn_about_learning(host):
    """`rlvr eval --set training.temperature=0` is a greedy eval, not a mistake."""
    greedy = {"algorithm": {"name": "grpo"}, "training": {"temperature": 0}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config(greedy, host, training=False)
    assert config.training.temperature == 0
