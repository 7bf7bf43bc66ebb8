"""rlvr.rewards.extract: number parsing, blocks, boxes and answer-extraction strategies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlvr.rewards.extract import (
    STRATEGIES,
    ExtractionParams,
    extract_answer,
    find_blocks,
    find_numbers,
    first_number,
    gold_from_gsm8k,
    gold_from_row,
    last_block,
    last_boxed,
    last_number,
    parse_number,
    strip_tags,
)

GSM8K = Path(__file__).resolve().parents[1] / "examples/data/gsm8k"


def load_gsm8k(split: str) -> list[dict[str, str]]:
    with open(GSM8K / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# --------------------------------------------------------------------------- parse_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", 18.0),
        ("1,080", 1080.0),
        ("$1,080", 1080.0),
        ("\\$1,080", 1080.0),
        ("1,000.00", 1000.0),
        ("109,200,000", 109200000.0),
        ("1{,}080", 1080.0),
        ("1\\,080", 1080.0),
        ("1\u2009080", 1080.0),
        ("-3", -3.0),
        ("\u22123", -3.0),
        ("+4", 4.0),
        ("-$3", -3.0),
        ("72.", 72.0),
        ("72.50", 72.5),
        (".5", 0.5),
        ("18 dollars", 18.0),
        ("18 dollars.", 18.0),
        ("18\\text{ dollars}", 18.0),
        ("5 km/h", 5.0),
        ("90^\\circ", 90.0),
        ("90\u00b0", 90.0),
        ("50%", 50.0),
        ("50\\%", 50.0),
        ("50 percent", 50.0),
        ("\\frac{1}{2}", 0.5),
        ("\\dfrac{3}{4}", 0.75),
        ("\\tfrac{1}{4}", 0.25),
        ("\\frac12", 0.5),
        ("-\\frac{3}{4}", -0.75),
        ("\\frac{-3}{4}", -0.75),
        ("1/2", 0.5),
        ("\\frac{36}{2}", 18.0),
        ("\\boxed{18}", 18.0),
        ("\\boxed{\\frac{1}{2}}", 0.5),
        ("\\(18\\)", 18.0),
        ("\\[ -3 \\]", -3.0),
        ("$18$", 18.0),
        ("**18**", 18.0),
        ("{18}", 18.0),
        ("\\!18", 18.0),
        ("  18  ", 18.0),
    ],
)
def test_parse_number_spellings(text: str, value: float) -> None:
    assert parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "about 18",
        "18 + 2",
        "7, 8",
        "7,8",
        "1,0800",
        "2x",
        "2 x",
        "18 dollars and 50 cents",
        "1/0",
        "\\frac{1}{0}",
        "x = 5",
        "1e5",
        "eighteen",
        "\\boxed{1} + \\boxed{2}",
        "\\boxed{18",
    ],
)
def test_parse_number_rejects_non_numbers(text: str) -> None:
    assert parse_number(text) is None


def test_parse_number_percent_is_configurable() -> None:
    assert parse_number("50%") == 50.0
    assert parse_number("50%", percent="fraction") == 0.5
    assert parse_number("12.5 percent", percent="fraction") == pytest.approx(0.125)
    assert parse_number("50", percent="fraction") == 50.0  # only a written % is divided


def test_every_gsm8k_gold_parses_to_its_integer() -> None:
    rows = load_gsm8k("train") + load_gsm8k("test")
    assert len(rows) == 8792
    for row in rows:
        gold = gold_from_gsm8k(row["answer"])
        assert parse_number(gold) == int(gold.replace(",", "")), gold


# --------------------------------------------------------------------------- numbers in text


def test_find_numbers_keeps_signs_commas_and_drops_sentence_periods() -> None:
    text = "She had 5-3 = 2 apples; x = -3 and \u22124, she paid $1,080. 24/2 = 12, so 50%. is 72."
    assert [n.value for n in find_numbers(text)] == [5, 3, 2, -3, -4, 1080, 12, 12, 50, 72]
    assert [n.text for n in find_numbers("is 72. Then 1,000.00 and \\frac{1}{2}")] == [
        "72",
        "1,000.00",
        "\\frac{1}{2}",
    ]


def test_first_and_last_number() -> None:
    assert first_number("It costs $1,080 or -3 dollars") == 1080
    assert last_number("It costs $1,080 or -3 dollars") == -3
    assert first_number("no digits here") is None
    assert last_number("") is None
    assert last_number("The answer is 50%", percent="fraction") == 0.5


def test_last_number_of_every_gsm8k_solution_is_its_gold() -> None:
    for row in load_gsm8k("test"):
        gold = float(gold_from_gsm8k(row["answer"]).replace(",", ""))
        assert last_number(row["answer"]) == gold


# --------------------------------------------------------------------------- blocks and boxes


def test_find_blocks() -> None:
    text = "<a>1</a> x <a> 2 </a><a>unclosed"
    assert find_blocks(text, "<a>", "</a>") == ["1", " 2 "]
    assert last_block(text, "<a>", "</a>") == " 2 "
    assert last_block("nothing", "<a>", "</a>") is None
    assert last_block("</a>reversed<a>", "<a>", "</a>") is None
    assert find_blocks("<a></a>", "<a>", "</a>") == [""]


def test_last_boxed_balances_braces() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\{7, 8\\}}") == "\\{7, 8\\}"
    assert last_boxed("\\boxed{7, 8}") == "7, 8"
    assert last_boxed("\\boxed{3} and a truncated \\boxed{\\frac{1}{") == "3"
    assert last_boxed("\\fbox{4}") == "4"
    assert last_boxed("$\\boxed 5$") == "5"
    assert last_boxed("no box") is None


def test_strip_tags() -> None:
    assert strip_tags("<SOLUTION>-3</SOLUTION>").strip() == "-3"
    assert strip_tags("[[A]]18[[/A]]", "[[A]]", "[[/A]]").strip() == "18"
    assert strip_tags("x < y > z") == "x < y > z"


def test_gold_helpers_on_real_rows() -> None:
    row = load_gsm8k("train")[345]
    assert row["answer"].endswith("#### 1,080")
    assert gold_from_gsm8k(row["answer"]) == "1,080"
    assert gold_from_row(row) == "1,080"
    assert gold_from_row({"solution": "7\\pi"}, "solution") == "7\\pi"
    assert gold_from_row({"answer": 42}) == "42"
    with pytest.raises(KeyError, match="no field 'answer'.*question"):
        gold_from_row({"question": "?"})


# --------------------------------------------------------------------------- strategies


@pytest.mark.parametrize(
    ("completion", "text", "strategy"),
    [
        ("<think>9*2</think><answer>18</answer>", "18", "answer_tag"),
        ("<answer>5</answer> <answer> 18 </answer>", "18", "answer_tag"),
        ("So \\boxed{17} no wait \\boxed{18}", "18", "boxed"),
        ("9 * 2 = 18\n#### 18", "18", "hash"),
        ("Total is 9*2.\n#### 1,080\n", "1,080", "hash"),
        ("9 * 2 = 18. The answer is 18.", "18", "answer_is"),
        ("The final answer is $18$. I hope it is correct.", "$18$", "answer_is"),
        ("Q: How many?\nA: 18", "18", "answer_is"),
        ("**Answer:** 72.", "72", "answer_is"),
        ("Answer:\n\n-3", "-3", "answer_is"),
        ("The answer is 18 dollars.", "18 dollars", "answer_is"),
        ("She pays 9 * 2 = 18", "18", "last_number"),
        ("It is 72.", "72", "last_number"),
    ],
)
def test_extract_answer_strategies(completion: str, text: str, strategy: str) -> None:
    found = extract_answer(completion)
    assert found is not None
    assert (found.text, found.strategy) == (text, strategy)


def test_extract_answer_order_and_fallthrough() -> None:
    text = "<answer>18</answer> \\boxed{17}\n#### 16\nThe answer is 15"
    assert extract_answer(text).text == "18"
    assert extract_answer(text, ["boxed", "answer_tag"]).text == "17"
    assert extract_answer(text, ["hash"]).text == "16"
    assert extract_answer(text, ["answer_is"]).text == "15"
    # a blank answer block falls through to the next strategy
    assert extract_answer("<answer> </answer> so 18").strategy == "last_number"
    assert extract_answer("<answer> </answer> so 18", ["answer_tag"]) is None
    assert extract_answer("no answer at all") is None


def test_extract_answer_keeps_raw_whitespace() -> None:
    found = extract_answer("<answer> 18 </answer>")
    assert (found.text, found.raw) == ("18", " 18 ")


def test_box_inside_reasoning_does_not_count_after_reasoning_closes() -> None:
    completion = "<think>maybe \\boxed{5}</think>The answer is 18."
    assert extract_answer(completion).text == "18"
    assert extract_answer(completion, after_reasoning=False).text == "5"
    # reasoning never closed: everything is searched
    assert extract_answer("<think>maybe \\boxed{5}").text == "5"


def test_extraction_params() -> None:
    params = ExtractionParams(strategies=["answer_tag"], answer_start="<S>", answer_end="</S>")
    assert params.extract("<think>x</think><S>-3</S>").text == "-3"
    assert params.extract("-3") is None
    assert ExtractionParams().strategies == STRATEGIES
    with pytest.raises(ValidationError, match="at least one strategy"):
        ExtractionParams(strategies=[])
    with pytest.raises(ValidationError, match="only once"):
        ExtractionParams(strategies=["boxed", "boxed"])
    with pytest.raises(ValidationError, match="boxes"):
        ExtractionParams(strategies=["boxes"])
    with pytest.raises(ValidationError, match="non-empty"):
        ExtractionParams(answer_start="")
    with pytest.raises(ValidationError, match="Extra inputs"):
        ExtractionParams(strategy=["boxed"])


def test_every_gsm8k_solution_extracts_its_gold() -> None:
    for row in load_gsm8k("test"):
        found = extract_answer(row["answer"])
        assert found is not None and found.strategy == "hash"
        assert found.text == gold_from_gsm8k(row["answer"])
