"""A worked exchange with a tool call in ``data.few_shot``, and tool calling on a chat template
that renders none of it (SmolLM2's plain ChatML, the tiny model's too): the config forms and
their refusals, what the template is asked, what rlvr writes in its place, and a scripted
episode of the ``tools`` environment that shows the model the exchange and answers its call."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from rlvr.api.host import create_host
from rlvr.cli.env_check import env_check, from_config
from rlvr.config.schema import ConfigError, DataConfig, ModelConfig, load_config
from rlvr.data.prompts import prompt_messages
from rlvr.model.loading import load_tokenizer
from rlvr.plugins.environments.tools import calculator
from rlvr.rollout.completions import sample_record
from rlvr.rollout.template_tools import TemplateTools, for_template, template_tools
from rlvr.rollout.tools import parse_tool_calls, tool_schema

CALL = {"name": "calculator", "arguments": {"expression": "12 * 34"}}
EXCHANGE = [
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "tool", "content": "408"},
    {"role": "assistant", "content": "<answer>408</answer>"},
]
AS_MESSAGES = [
    {"role": "user", "content": "What is 12 * 34?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": CALL}],
    },
    {"role": "tool", "content": "408", "name": "calculator"},
    {"role": "assistant", "content": "<answer>408</answer>"},
]

#: A Qwen2.5-like template: it shows the tools and writes structured calls itself.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n"
    "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def chatml(tiny_model_dir):
    """The tiny model's tokenizer: plain ChatML, as SmolLM2's (no tools, no tool calls)."""
    return load_tokenizer(ModelConfig(name_or_path=str(tiny_model_dir)))


# --------------------------------------------------------------------------- the config


def test_a_worked_exchange_with_a_tool_call_becomes_its_chat_messages():
    data = DataConfig(path="x", system_prompt="Be brief.", few_shot=[{"messages": EXCHANGE}])
    messages = prompt_messages({"prompt": "What is 57 * 86?"}, data)
    assert messages == [
        {"role": "system", "content": "Be brief."},
        *AS_MESSAGES,
        {"role": "user", "content": "What is 57 * 86?"},
    ]


def test_openai_style_calls_read_the_same_and_pairs_mix_with_exchanges():
    openai = [
        EXCHANGE[0],
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {**CALL, "arguments": json.dumps(CALL["arguments"])},
                }
            ],
        },
        *EXCHANGE[2:],
    ]
    pair = {"user": "What is 2 + 2?", "assistant": "<answer>4</answer>"}
    data = DataConfig(path="x", few_shot=[pair, {"messages": openai}])
    got = prompt_messages({"prompt": "Q"}, data)
    assert got[:2] == [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "<answer>4</answer>"},
    ]
    assert got[2:6] == AS_MESSAGES


@pytest.mark.parametrize(
    "shot, says",
    [
        ({"user": "Q"}, "needs both user and assistant"),
        ({"user": "Q", "assistant": "A", "messages": EXCHANGE}, "not both"),
        ({"messages": EXCHANGE[1:]}, "must start with a user message"),
        ({"messages": EXCHANGE[:2]}, "must end with the assistant's final answer"),
        ({"messages": [EXCHANGE[0], EXCHANGE[1], EXCHANGE[3]]}, "have no tool message"),
        ({"messages": [EXCHANGE[0], EXCHANGE[2], EXCHANGE[3]]}, "answers no call"),
        (
            {"messages": [{"role": "user", "content": "Q", "tool_calls": [CALL]}, EXCHANGE[3]]},
            "only an assistant's",
        ),
        ({"messages": [{"role": "robot", "content": "Q"}, EXCHANGE[3]]}, "role"),
        ({"messages": [EXCHANGE[0], {"role": "assistant", "tool_calls": [{}]}]}, "name"),
    ],
)
def test_a_malformed_exchange_is_refused_saying_what_to_fix(shot, says):
    with pytest.raises(ValidationError) as caught:
        DataConfig(path="x", few_shot=[shot])
    assert says in str(caught.value)


def write_config(tmp_path, environment: str, few_shot: list) -> str:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"question": "What is 388 * 27?", "answer": "10476"}) + "\n")
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            data: {{path: {rows}, prompt_field: question, chat_template: true,
                    few_shot: {json.dumps(few_shot)}}}
            rewards: [{{name: numbers, params: {{strategies: [answer_tag]}}}}]
            """
        )
        + environment
    )
    return str(path)


def test_tool_calls_in_a_worked_exchange_need_an_environment_that_answers_them(tmp_path):
    path = write_config(tmp_path, "", [{"messages": EXCHANGE}])
    with pytest.raises(ConfigError) as caught:
        load_config(path, create_host(), require=("data",), training=False)
    lines = [line for line in str(caught.value).splitlines() if "few_shot" in line]
    assert len(lines) == 1 and "data.few_shot[0].messages" in lines[0]
    assert "environment" in lines[0]


# --------------------------------------------------------------------------- the template


def test_the_template_is_asked_what_it_renders_of_tool_calling(chatml):
    assert template_tools(chatml) == TemplateTools(shows_tools=False, writes_calls=False)
    chatml_tools = chatml.chat_template
    try:
        chatml.chat_template = TOOL_TEMPLATE
        assert template_tools(chatml) == TemplateTools(shows_tools=True, writes_calls=True)
    finally:
        chatml.chat_template = chatml_tools


def test_what_a_plain_template_drops_is_written_as_the_calls_rlvr_parses(chatml):
    data = DataConfig(path="x", system_prompt="Be brief.", few_shot=[{"messages": EXCHANGE}])
    messages = prompt_messages({"prompt": "What is 57 * 86?"}, data)
    schema = tool_schema(calculator)
    shown, tools = for_template(messages, [schema], "hermes", template_tools(chatml))
    assert tools is None  # the schema is in the system message instead
    system = shown[0]["content"]
    assert system.startswith("Be brief.\n\n") and json.dumps(schema) in system
    assert "<tool_call>" in system  # the instruction, with the call's form
    call = shown[2]
    assert parse_tool_calls(call["content"], "hermes") == AS_MESSAGES[1]["tool_calls"]
    assert "tool_calls" not in call
    assert shown[3]["content"] == "<tool_response>\n408\n</tool_response>"
    text = chatml.apply_chat_template(shown, tokenize=False, add_generation_prompt=True)
    # the model is shown the call as it has to write one: the rendered turn parses back
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse_tool_calls(turn, "hermes") == AS_MESSAGES[1]["tool_calls"]
    # a sampled message holds its call already: it is not written twice
    sampled = {"role": "assistant", "content": call["content"], "tool_calls": call_entries()}
    again, _ = for_template([sampled], None, "hermes", template_tools(chatml))
    assert again == [sampled]


def call_entries() -> list[dict]:
    return [{"type": "function", "function": CALL}]


def test_a_template_that_renders_tools_and_a_format_that_parses_none_are_left_alone(chatml):
    messages = [*AS_MESSAGES]
    schemas = [tool_schema(calculator)]
    assert for_template(messages, schemas, "hermes", TemplateTools(True, True)) == (
        messages,
        schemas,
    )
    assert for_template(messages, schemas, "none", template_tools(chatml)) == (messages, schemas)


# --------------------------------------------------------------------------- an episode


def test_an_episode_shows_the_exchange_and_answers_the_models_call(tmp_path):
    environment = (
        "environment: {name: tools, params: {tools: [calculator]}, max_turns: 3, "
        "max_episode_tokens: 2000, tool_call_format: hermes}\n"
        "training: {max_prompt_length: 2000, max_completion_length: 64}\n"
    )
    path = write_config(tmp_path, environment, [{"messages": EXCHANGE}])
    script = tmp_path / "script.json"
    model_call = (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "388 * 27"}}\n</tool_call>'
    )
    script.write_text(json.dumps([model_call, "<answer>10476</answer>"]))
    host = create_host()
    config = from_config(host, path, None, [])
    _, run = env_check(host, None, config=config, script=str(script), episodes=1)
    (episode,) = run.episodes
    assert episode.failed is None and episode.tool_calls == 1 and episode.turns == 2
    prompt = episode.rendered.split("What is 388 * 27?")[0]
    assert '"name": "calculator"' in prompt.split("<tools>\n")[1]  # the schema
    assert '{"name": "calculator", "arguments": {"expression": "12 * 34"}}' in prompt
    assert "<tool_response>\n10476\n</tool_response>" in episode.transcript_text
    assert run.completions[0].rewards["numbers"] == 1.0
    # samples.jsonl shows the prompt the model got (tools and the exchange's call included),
    # not the data's prompt rendered without them
    c = run.completions[0]
    assert c.prompt_text == episode.prompt_text and c.prompt_text.startswith(prompt)
    data_prompt = SimpleNamespace(text="the data's prompt", row={"answer": "10476"})
    assert sample_record(c, [data_prompt], "prompt")["prompt"] == c.prompt_text  # type: ignore[arg-type]
