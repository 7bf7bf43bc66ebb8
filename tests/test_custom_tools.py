"""#45 item 5: the ``tools`` environment takes the user's functions (``"pkg.module:fn"``,
``"file.py:fn"``) beside the built-in calculator: their schema from the signature and the
docstring, ``--allow-code`` to run them, the model's arguments checked before a call, and
``rlvr validate`` reading (never running) their source for what it can tell."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import textwrap

import pytest
from tool_result import last_tool_result

import rlvr
from rlvr.api.host import create_host
from rlvr.api.runtime import Generation, RunInfo
from rlvr.cli.main import main
from rlvr.config.schema import CodeOptInError, ConfigError, ModelConfig, load_config
from rlvr.model.loading import load_policy
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.environments.params import ToolsParams
from rlvr.plugins.environments.tools import ToolsEnvironment, load_tool
from rlvr.rollout.tools import check_tool, tool_arguments

RUN = RunInfo(max_completion_length=6, num_generations=2, seed=0)

TOOLS_PY = '''
from typing import Literal, Optional


def weather(city: str, days: int = 1, units: Literal["C", "F"] = "C",
            hours: Optional[list[int]] = None, extra: dict = {}) -> dict:
    """Forecast the weather of a city.

    A second paragraph the model is not shown.

    Args:
        city: the city's name
        days: how many days ahead
    """
    return {"city": city, "days": days, "units": units, "hours": hours}


def multiply(a: int, b: int) -> dict:
    """Multiply two whole numbers."""
    return {"product": a * b}


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def broken(x: float) -> str:
    """Always fails."""
    raise RuntimeError(f"no data for {x}")


def splat(*items: str) -> str:
    return ""


def untyped(x) -> str:
    return ""


def sets(x: set[int]) -> str:
    return ""


def only(x: int, /) -> int:
    return x


class Weather:
    pass


ANSWER = 42
'''

LOOKUP_PY = '''
def lookup(key: str) -> str:
    """Look a key up in the table."""
    return {"pi": "3.14159"}.get(key, "unknown key")
'''


@pytest.fixture
def tool_files(tmp_path, monkeypatch):
    """``tmp_path/tools.py`` (a file spec) and the package ``mypkg.table`` on ``sys.path`` (a
    module spec)."""
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "table.py").write_text(LOOKUP_PY)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    # each test imports its own mypkg: one cached by an earlier test lives in that test's
    # tmp_path, removed once it passed
    forget = [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]
    for name in forget:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def params(tool_files, *tools: str) -> ToolsParams:
    return ToolsParams.model_validate({"tools": list(tools)}, context={"config_dir": tool_files})


def respond(env, *calls):
    """The environment's reply to one assistant message making ``calls``, each
    ``{"name", "arguments"}`` given to it as written (the arguments a dict or JSON text)."""
    tool_calls = [{"type": "function", "function": c} for c in calls]
    message = {"role": "assistant", "content": "", "tool_calls": tool_calls}

    async def turn():
        start = await env.start({}, [{"role": "user", "content": "hi"}])
        return await env.respond(start.state, message)

    return asyncio.run(turn())


def test_the_schema_comes_from_the_signature_and_the_docstring(tool_files):
    name, fn, schema = load_tool(f"{tool_files}/tools.py:weather")
    assert name == "weather" and fn(city="Oslo")["city"] == "Oslo"
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "weather"
    assert function["description"] == "Forecast the weather of a city."  # the first paragraph
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city's name"},
            "days": {"type": "integer", "description": "how many days ahead"},
            "units": {"type": "string", "enum": ["C", "F"]},
            "hours": {"type": "array", "items": {"type": "integer"}, "nullable": True},
            "extra": {"type": "object"},
        },
        "required": ["city"],
    }


def test_file_and_module_specs_mix_with_the_built_in_tools(tool_files):
    p = params(tool_files, "calculator", "mypkg.table:lookup", "tools.py:multiply")
    assert p.tools[2] == f"{tool_files}/tools.py:multiply"  # from the config's directory
    env = ToolsEnvironment(p, RUN)
    names = [s["function"]["name"] for s in env.schemas]
    assert names == ["calculator", "lookup", "multiply"]
    reply = respond(
        env,
        {"name": "lookup", "arguments": {"key": "pi"}},
        {"name": "multiply", "arguments": {"a": 6, "b": 7}},
        {"name": "calculator", "arguments": {"expression": "2 + 3"}},
    )
    assert reply.messages == [
        {"role": "tool", "name": "lookup", "content": "3.14159"},  # a str as it is
        {"role": "tool", "name": "multiply", "content": '{"product": 42}'},  # else JSON
        {"role": "tool", "name": "calculator", "content": "5"},
    ]
    assert not reply.done


def test_a_tool_name_is_one_tool(tool_files):
    with pytest.raises(ValueError, match="two tools are named 'multiply'"):
        params(tool_files, "tools.py:multiply", "mypkg.table:lookup", "tools.py:multiply")


def test_bad_arguments_and_failures_are_tool_errors_the_model_reads(tool_files):
    env = ToolsEnvironment(params(tool_files, "tools.py:weather", "tools.py:broken"), RUN)
    reply = respond(
        env,
        {"name": "weather", "arguments": {"days": "two"}},
        {"name": "weather", "arguments": {"city": "Oslo", "units": "K", "when": "now"}},
        {"name": "weather", "arguments": '{"city": "Oslo", "days": 2.0}'},  # JSON text
        {"name": "broken", "arguments": {"x": 1}},
    )
    assert not reply.done and all(m["role"] == "tool" for m in reply.messages)
    first, second, third, fourth = (m["content"] for m in reply.messages)
    assert first == (
        "error: bad arguments: missing required argument 'city'; 'days' must be an integer, "
        'not string "two"'
    )
    assert second == (
        "error: bad arguments: unknown argument 'when' (the parameters are: city, days, units, "
        """hours, extra); 'units' must be one of ["C", "F"], not "K\""""
    )
    assert json.loads(third) == {"city": "Oslo", "days": 2, "units": "C", "hours": None}
    assert fourth == "error: RuntimeError: no data for 1.0"  # the int became the float hinted


def test_arguments_as_a_dict_or_json_text(tool_files):
    _, fn, _ = load_tool(f"{tool_files}/tools.py:weather")
    assert tool_arguments(fn, {"city": "Oslo"}) == {"city": "Oslo"}
    assert tool_arguments(fn, '{"city": "Oslo", "hours": [1, 2]}') == {
        "city": "Oslo",
        "hours": [1, 2],
    }
    assert tool_arguments(fn, '{"city": "Oslo", "hours": null}')["hours"] is None
    with pytest.raises(ValueError, match="not valid JSON"):
        tool_arguments(fn, "{city")
    with pytest.raises(ValueError, match="must be a JSON object of the parameters, not array"):
        tool_arguments(fn, "[1]")
    with pytest.raises(ValueError, match="'days' must be an integer, not boolean true"):
        tool_arguments(fn, {"city": "Oslo", "days": True})
    with pytest.raises(ValueError, match=r"'hours' must be an integer, not string"):
        tool_arguments(fn, {"city": "Oslo", "hours": ["1"]})


def test_an_async_tool_is_awaited(tool_files):
    env = ToolsEnvironment(params(tool_files, "tools.py:shout"), RUN)
    reply = respond(env, {"name": "shout", "arguments": {"text": "hey"}})
    assert reply.messages == [{"role": "tool", "name": "shout", "content": "HEY"}]


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        ("tools.py:splat", "tool '{d}/tools.py:splat': *items cannot be described"),
        ("tools.py:untyped", "tool '{d}/tools.py:untyped': parameter 'x' needs a type hint"),
        ("tools.py:sets", "tool '{d}/tools.py:sets': parameter 'x': type set[int] has no JSON"),
        ("tools.py:only", "tool '{d}/tools.py:only': parameter 'x' is positional-only"),
        ("tools.py:Weather", "tool '{d}/tools.py:Weather' is a class; a tool is a function"),
        ("tools.py:ANSWER", "tool '{d}/tools.py:ANSWER' is an int, not a function"),
        ("tools.py:wether", "'{d}/tools.py' defines no 'wether' at top level; did you mean"),
        ("nothere.py:f", "no file '{d}/nothere.py'"),
        ("nosuchpkg.x:f", "module 'nosuchpkg' is not importable"),
        ("mypkg.tabel:lookup", "package 'mypkg' has no module 'tabel'"),
        ("mypkg.table:lokup", "defines no 'lokup' at top level; did you mean 'lookup'?"),
    ],
)
def test_validate_reads_each_tool_and_names_the_spec_and_parameter(
    tool, problem, tool_files, train_sections
):
    config = tool_files / "run.yaml"
    config.write_text(
        train_sections
        + "rewards: [{name: numbers}]\ntraining: {reward_workers: 0}\n"
        + f"environment: {{name: tools, params: {{tools: [calculator, '{tool}']}}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        rlvr.validate(config, allow_code=True)
    found = dict(info.value.problems)
    assert problem.format(d=tool_files) in found["environment.params.tools[1]"]


def test_validate_runs_none_of_the_tools_code(tool_files, train_sections):
    (tool_files / "explosive.py").write_text(
        "raise SystemExit('imported!')\n\ndef fine(x: str) -> str:\n    return x\n"
    )
    config = tool_files / "run.yaml"
    config.write_text(
        train_sections
        + "rewards: [{name: numbers}]\ntraining: {reward_workers: 0}\n"
        + "environment: {name: tools, params: {tools: ['explosive.py:fine']}}\n"
    )
    assert rlvr.validate(config, allow_code=True).environment.params.tools == [
        f"{tool_files}/explosive.py:fine"
    ]
    # the build imports it: that is what --allow-code allowed
    with pytest.raises(SystemExit, match="imported!"):
        load_tool(f"{tool_files}/explosive.py:fine")


def test_an_unknown_built_in_tool_is_named():
    host = create_host()
    base = {"model": {"name_or_path": "m"}, "data": {"path": "d.jsonl"}, "rewards": []}
    bad = {"name": "tools", "params": {"tools": ["calculator", "shell"]}}
    with pytest.raises(ConfigError) as info:
        load_config(base | {"environment": bad}, host, require=("algorithm",))
    problem = dict(info.value.problems)["environment.params.tools[1]"]
    assert "unknown built-in tool 'shell' (the built-in tools: calculator)" in problem
    assert "'module:function' or 'path/to/file.py:function'" in problem


def test_a_users_tool_needs_allow_code(tool_files, train_sections, capsys):
    config = tool_files / "run.yaml"
    config.write_text(
        train_sections
        + "rewards: [{name: numbers}]\ntraining: {reward_workers: 0}\n"
        + "environment: {name: tools, params: {tools: [calculator, 'tools.py:multiply']}}\n"
    )
    assert main(["validate", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: environment (tools) imports and runs")
    assert f"'{tool_files}/tools.py:multiply': pass --allow-code to allow it" in err
    with pytest.raises(CodeOptInError):  # eval runs the episodes too
        rlvr.evaluate(config)
    assert main(["validate", str(config), "--allow-code"]) == 0
    builtin_only = tool_files / "calc.yaml"
    builtin_only.write_text(config.read_text().replace(", 'tools.py:multiply'", ""))
    assert main(["validate", str(builtin_only)]) == 0  # the calculator is no code of yours


def multiplying(tok):
    """``HFGenerator.generate`` as a policy that calls the user's ``multiply`` on the
    question's numbers, then answers with the ``product`` of its result (what a trained model
    does; the tiny random one never writes a tool call)."""
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts, n, sampling):
        ids = []
        for p in prompts:
            text = tok.decode(p)
            result = last_tool_result(text)
            if result is not None:
                out = f"The answer is {json.loads(result)['product']}."
            else:
                a, b = re.findall(r"What is (\d+) \* (\d+)\?", text)[-1]
                call = {"name": "multiply", "arguments": json.dumps({"a": int(a), "b": int(b)})}
                out = f"<tool_call>{json.dumps(call)}</tool_call>"
            ids += [tok(out, add_special_tokens=False)["input_ids"] + [end]] * n
        return Generation(
            token_ids=ids,
            texts=[tok.decode(i, skip_special_tokens=True) for i in ids],
            truncated=[False] * len(ids),
            logprobs=[[0.0] * len(i) for i in ids] if sampling.logprobs else None,
        )

    return generate


def test_an_episode_calls_the_users_tool_and_its_result_reaches_the_transcript(
    tool_files, tiny_model_dir, monkeypatch
):
    rows = tool_files / "rows.jsonl"
    rows.write_text(
        "\n".join(
            json.dumps({"prompt": f"What is {a} * {b}?", "answer": str(a * b)})
            for a, b in [(6, 7), (3, 5)]
        )
    )
    config = tool_files / "run.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            model: {{name_or_path: {tiny_model_dir}}}
            data: {{path: {rows}, eval_path: {rows}, chat_template: true}}
            rewards: [{{name: numbers}}]
            environment:
              name: tools
              params: {{tools: [calculator, "tools.py:multiply"]}}
              max_turns: 3
              tool_call_format: hermes
            # max_prompt_length: both tools' schemas go into the system message
            training: {{output_dir: {tool_files / "out"}, max_completion_length: 96,
                        max_prompt_length: 1536}}
            """
        )
    )
    _, tok = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)), device="cpu")
    monkeypatch.setattr(HFGenerator, "generate", multiplying(tok))
    summary = rlvr.evaluate(config, greedy=True, output=tool_files / "eval", allow_code=True)
    assert summary["accuracy"] == 1.0 and summary["env/tool_calls_mean"] == 1
    samples = [json.loads(line) for line in (tool_files / "eval" / "samples.jsonl").open()]
    transcript = samples[0]["transcript"]
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "assistant"]
    call = transcript[1]["tool_calls"][0]  # the JSON-text arguments, read as a dict
    assert call == {
        "type": "function",
        "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}},
    }
    assert transcript[2]["name"] == "multiply"
    assert transcript[2]["content"] == '{"product": 42}'  # the user's function's result
    assert samples[0]["completion"] == "The answer is 42."


def test_check_tool_is_lenient_where_only_running_would_tell(tool_files):
    (tool_files / "hinted.py").write_text(
        "import typing as t\nfrom dataclasses import dataclass\nfrom mylib import Point\n\n"
        "def f(a: t.Optional[int], b: 'list[str]', c: Point) -> str:\n    return ''\n\n"
        "@dataclass\nclass Q:\n    pass\n\n"
        "def g(q: Q) -> str:\n    return ''\n"
    )
    assert check_tool(f"{tool_files}/hinted.py:f") is None  # Point: the build checks it
    assert check_tool(f"{tool_files}/hinted.py:g") is None
    assert check_tool("os.path:join") is None  # a module made on import: left to the build


def test_env_check_runs_a_users_tool_only_with_allow_code(tool_files, monkeypatch, capsys):
    monkeypatch.chdir(tool_files)  # a --set file spec is relative to the current directory
    call = {"name": "multiply", "arguments": {"a": 6, "b": 7}}
    script = tool_files / "script.yaml"
    script.write_text(json.dumps([f"<tool_call>{json.dumps(call)}</tool_call>", "It is 42."]))
    argv = ["env", "check", "tools", "--script", str(script), "--episodes", "1"]
    argv += ["--set", "tools=[calculator, 'tools.py:multiply']"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"'{tool_files}/tools.py:multiply': pass --allow-code to allow it" in err
    assert main([*argv, "--allow-code"]) == 0
    out = capsys.readouterr().out
    assert '<tool_response>\n    {"product": 42}\n    </tool_response><|im_end|>' in out
    assert "turns: 2, tool calls: 1" in out
