"""Plugin discovery: built-ins through entry points, fake installed packages, failures."""

from __future__ import annotations

import json

import pytest

from rlvr.api.host import PluginError, create_host
from rlvr.cli.main import main

GOOD = """
from rlvr.plugin import hookimpl
from rlvr.api.registration import Params, Reward

class LenParams(Params):
    scale: float = 1.0

class LenReward:
    def __init__(self, params):
        self.scale = params.scale
    def __call__(self, sample):
        return self.scale * len(sample.completion)

@hookimpl
def rlvr_register_rewards(register):
    register(Reward(name="{name}", params=LenParams, factory=LenReward,
                    description="length of the completion"))
"""


def test_builtins_register_through_entry_points():
    host = create_host()
    assert {"format", "answer", "numbers", "length_penalty"} <= set(host.rewards)
    assert all(r.dist == "rlvr" for r in host.rewards.values())
    assert {p.name for p in host.plugins} >= {"rewards", "algorithms", "backends"}
    assert host.failures == []


def test_fake_installed_plugin_is_found_with_its_distribution(fake_dist):
    fake_dist("rlvr-len", "rlvr_len_a", {"len": "rlvr_len_a"}, GOOD.format(name="len"))
    host = create_host()
    record = host.rewards["len"]
    assert record.dist == "rlvr-len"
    assert record.factory(record.params(scale=2.0)).__class__.__name__ == "LenReward"
    info = next(p for p in host.plugins if p.dist == "rlvr-len")
    assert info.version == "1.0" and info.registered == [("reward", "len")]


def test_broken_import_is_recorded_not_fatal(fake_dist, monkeypatch):
    fake_dist("rlvr-broken", "rlvr_broken_b", {"broken": "rlvr_broken_b"}, "import nope_xyz\n")
    host = create_host()
    assert "format" in host.rewards  # rlvr still works
    (failure,) = host.failures
    assert failure.dist == "rlvr-broken"
    assert "nope_xyz" in failure.error
    # The same failure is fatal in strict mode (for CI).
    monkeypatch.setenv("RLVR_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="nope_xyz"):
        create_host()


def test_bad_registration_is_recorded(fake_dist):
    source = """
from rlvr.plugin import hookimpl
from pydantic import BaseModel
from rlvr.api.registration import Reward

class Loose(BaseModel):  # accepts unknown keys: not allowed
    x: int = 1

@hookimpl
def rlvr_register_rewards(register):
    register("not a record")
    register(Reward(name="loose", params=Loose, factory=dict, description="d"))
"""
    fake_dist("rlvr-bad", "rlvr_bad_c", {"bad": "rlvr_bad_c"}, source)
    host = create_host()
    errors = [f.error for f in host.failures]
    assert any("expected an rlvr.api.registration.Reward" in e for e in errors)
    assert any("must reject unknown keys" in e for e in errors)
    assert "loose" not in host.rewards


def test_duplicate_name_names_both_providers(fake_dist):
    fake_dist("rlvr-one", "rlvr_one_d", {"one": "rlvr_one_d"}, GOOD.format(name="format"))
    host = create_host()
    assert "format" not in host.rewards
    (failure,) = host.failures
    assert "rlvr" in failure.error and "rlvr-one" in failure.error
    with pytest.raises(KeyError, match="more than one plugin"):
        host.get("reward", "format")


def test_allow_list_and_disable(fake_dist, monkeypatch):
    fake_dist("rlvr-len2", "rlvr_len_e", {"len2": "rlvr_len_e"}, GOOD.format(name="len2"))
    monkeypatch.setenv("RLVR_PLUGINS", "something-else")
    host = create_host()
    assert "len2" not in host.rewards and "format" in host.rewards  # built-ins stay
    monkeypatch.setenv("RLVR_PLUGINS", "rlvr-len2")
    assert "len2" in create_host().rewards
    monkeypatch.delenv("RLVR_PLUGINS")
    monkeypatch.setenv("RLVR_DISABLE_PLUGINS", "rlvr-len2,rlvr:backends")
    host = create_host()
    assert "len2" not in host.rewards and not host.backends


def test_unknown_name_message_mentions_failed_plugins(fake_dist):
    fake_dist("rlvr-gone", "rlvr_gone_f", {"gone": "rlvr_gone_f"}, "raise RuntimeError('x')\n")
    message = create_host().unknown_message("reward", "anwser")
    assert "did you mean 'answer'" in message
    assert "rlvr-gone" in message


def test_plugins_command_json(fake_dist, capsys):
    fake_dist("rlvr-len3", "rlvr_len_g", {"len3": "rlvr_len_g"}, GOOD.format(name="len3"))
    fake_dist("rlvr-oops", "rlvr_oops_h", {"oops": "rlvr_oops_h"}, "1/0\n")
    assert main(["plugins", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_dist = {p["dist"]: p for p in out["plugins"]}
    assert by_dist["rlvr-len3"]["version"] == "1.0"
    assert by_dist["rlvr-len3"]["registers"][0]["name"] == "len3"
    failures = {f["dist"]: f["error"] for f in out["failures"]}
    assert "ZeroDivisionError" in failures["rlvr-oops"]
    assert main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "len3" in text and "failed plugins" in text


def test_plugins_table_columns_line_up(capsys):
    """#45 item 17: a name longer than the column (``reinforce_pp_baseline``) pushed its
    description out of line; every description starts in the same column."""
    assert main(["plugins"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert any(" reinforce_pp_baseline " in row for row in rows)
    starts = set()
    for row in rows:
        kind, name, description = row.split(maxsplit=2)
        starts.add(row.index(description, row.index(name) + len(name)))
    assert len(starts) == 1


def test_in_process_plugins_for_tests():
    class Plugin:
        from rlvr.plugin import hookimpl

        @hookimpl
        def rlvr_register_rewards(self, register):
            from rlvr.api.registration import Params, Reward

            register(Reward(name="p", params=Params, factory=dict, description="d"))

    host = create_host(entrypoints=False, plugins=[Plugin()])
    assert list(host.rewards) == ["p"] and host.rewards["p"].dist is None


def _host_with(record):
    from rlvr.plugin import hookimpl

    class Plugin:
        @hookimpl
        def rlvr_register_algorithms(self, register):
            register(record)

    return create_host(entrypoints=False, plugins=[Plugin()])


def test_a_factory_with_the_wrong_arguments_is_refused_when_it_registers(monkeypatch):
    from rlvr.api.registration import Algorithm, Params

    monkeypatch.delenv("RLVR_STRICT_PLUGINS", raising=False)  # CI sets it

    def two_args(params, run):
        return None

    def one_arg(params):  # an algorithm factory gets (params, run)
        return None

    ok = _host_with(Algorithm(name="ok", params=Params, factory=two_args, description="d"))
    assert "ok" in ok.algorithms and ok.failures == []
    bad = _host_with(Algorithm(name="bad", params=Params, factory=one_arg, description="d"))
    assert "bad" not in bad.algorithms
    (failure,) = bad.failures
    assert "factory must accept 2 positional argument(s) (params, run)" in failure.error
    assert "(params)" in failure.error  # its signature, as found
    monkeypatch.setenv("RLVR_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="factory must accept 2"):
        _host_with(Algorithm(name="bad", params=Params, factory=one_arg, description="d"))


def test_a_built_object_missing_a_member_is_named_before_training():
    from rlvr.api.host import build_algorithm, build_generator
    from rlvr.api.registration import Algorithm, Backend, Params, Requirements
    from rlvr.api.runtime import RunInfo

    class NoRounds:  # everything the trainer reads but max_generation_rounds and loss()
        num_iterations = 1
        value_learning_rate = None
        loss = "not a method"

        def select(self, batch):
            return None

        def prepare(self, batch):
            return batch, {}

    record = Algorithm(name="x", params=Params, factory=lambda p, r: NoRounds(), description="")
    run = RunInfo(max_completion_length=4, num_generations=2)
    with pytest.raises(PluginError, match=r"lacks loss\(\), max_generation_rounds"):
        build_algorithm(record, Params(), run, Requirements())

    closed = []

    class NoSync:
        def generate(self, prompts, n, sampling):
            return None

        def close(self):
            closed.append(True)

    backend = Backend(name="y", params=Params, factory=lambda p, r, m, t: NoSync(), description="")
    with pytest.raises(PluginError, match="backend 'y'.*lacks sync_weights"):
        build_generator(backend, Params(), run, None, None)
    assert closed == [True]  # what was built is closed again


REFUSING = """
from rlvr.plugin import Algorithm, Params, PluginError, hookimpl

class PickyParams(Params):
    window: int = 99

def build(params, run):
    raise PluginError(f"window {params.window} does not fit this run; set window below 8")

@hookimpl
def rlvr_register_algorithms(register):
    register(Algorithm(name="picky", params=PickyParams, factory=build,
                       description="refuses every configuration"))
"""


def test_a_factory_raising_plugin_error_gives_the_user_one_error_line(
    fake_dist, tmp_path, train_sections, capsys
):
    fake_dist("rlvr-picky", "rlvr_picky", {"picky": "rlvr_picky"}, REFUSING)
    config = tmp_path / "run.yaml"
    config.write_text(train_sections + "algorithm: {name: picky}\nrewards: [{name: answer}]\n")
    assert main(["validate", str(config)]) == 3
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: window 99 does not fit this run; set window below 8"], err
