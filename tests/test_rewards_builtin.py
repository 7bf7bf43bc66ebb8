"""The built-in rewards (format, answer, numbers, arithmetic, length_penalty) on real GSM8K rows."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rlvr.api.registration import Reward, Sample
from rlvr.plugins import rewards as builtin
from rlvr.plugins.rewards.answer import AnswerParams, AnswerReward
from rlvr.plugins.rewards.arithmetic import ArithmeticParams, ArithmeticReward
from rlvr.plugins.rewards.format import FormatParams, FormatReward
from rlvr.plugins.rewards.length_penalty import LengthPenaltyParams, LengthPenaltyReward
from rlvr.plugins.rewards.numbers import NumbersParams, NumbersReward
from rlvr.plugins.rewards.steps import StepsParams, StepsReward
from rlvr.rewards.calculations import calculation_results, written_calculations

ROOT = Path(__file__).resolve().parents[1]
GSM8K = Path(__file__).resolve().parents[1] / "examples/data/gsm8k"


def load_gsm8k(split: str) -> list[dict[str, str]]:
    with open(GSM8K / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def test_rows() -> list[dict[str, str]]:
    return load_gsm8k("test")


@pytest.fixture(scope="module")
def rows(test_rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Real rows picked for their gold answers."""
    train = load_gsm8k("train")
    picked = {
        "18": test_rows[0],  # Janet's ducks
        "-3": test_rows[1113],  # temperature drop
        "72": test_rows[106],  # inner volume of boxes
        "50": test_rows[1179],  # "What percentage of James' teeth ..."
        "1,080": train[345],  # gold written with a comma
    }
    for gold, row in picked.items():
        assert row["answer"].endswith(f"#### {gold}"), (gold, row["answer"][-20:])
    return picked


def sample(completion: str, row: dict[str, Any], num_tokens: int | None = None) -> Sample:
    return Sample(
        completion=completion, prompt=row.get("question", ""), row=row, num_tokens=num_tokens
    )


# --------------------------------------------------------------------------- registration


def registered() -> dict[str, Reward]:
    records: list[Reward] = []
    builtin.rlvr_register_rewards(register=records.append)
    return {r.name: r for r in records}


def test_hook_registers_the_builtin_rewards_with_fields(tiny_model_dir) -> None:
    records = registered()
    assert sorted(records) == [
        "answer",
        "arithmetic",
        "callable",
        "format",
        "length_penalty",
        "numbers",
        "reasoning_gym",
        "reward_model",
        "steps",
    ]
    needed = {
        "length_penalty": {"max_length": 100, "buffer": 10},
        "callable": {"function": "json:dumps"},
        "reward_model": {"model": str(tiny_model_dir)},  # a causal LM: a new one-label head
    }
    for record in records.values():
        if record.name == "reasoning_gym" and importlib.util.find_spec("reasoning_gym") is None:
            continue  # the optional extra rlvr[reasoning-gym]; tests/test_reasoning_gym.py
        assert record.description and record.factory(
            record.params.model_validate(needed.get(record.name, {}))
        )
    assert records["format"].fields(FormatParams()) == ()
    assert records["answer"].fields(AnswerParams()) == ("answer",)
    assert records["numbers"].fields(NumbersParams(gold_field="target")) == ("target",)
    assert records["steps"].fields(StepsParams(gold_field="solution")) == ("solution",)
    assert records["length_penalty"].fields(LengthPenaltyParams(max_length=9, buffer=1)) == ()


def test_importing_the_plugin_does_not_import_math_verify_or_sympy() -> None:
    code = (
        "import sys, rlvr.plugins.rewards\n"
        "print(sorted(m for m in ('math_verify', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_rewards_pickle_by_reference(rows: dict[str, dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams(correct=2.0))
    assert pickle.loads(pickle.dumps(AnswerReward)) is AnswerReward
    clone = pickle.loads(pickle.dumps(reward))
    assert clone(sample("<answer>18</answer>", rows["18"])) == 2.0


# --------------------------------------------------------------------------- format

THINK = "<think>She has 16 - 3 - 4 = 9 eggs, 9 * 2 = 18.</think>"


@pytest.mark.parametrize(
    ("completion", "ok"),
    [
        (f"{THINK}<answer>18</answer>", True),
        (f"\n  {THINK}\n<answer>\n18\n</answer>\n\n", True),  # whitespace around and inside
        (f"{THINK}\n<answer>18</answer>\njunk <answer>2</answer>", False),  # multiline-anchor hack
        (f"{THINK}<answer>18</answer>\njunk", False),  # text after the answer block
        (f"preamble {THINK}<answer>18</answer>", False),  # text before the reasoning block
        (f"{THINK} so: <answer>18</answer>", False),  # text between (allow_text_between off)
        ("<think></think><answer>18</answer>", False),  # empty reasoning
        (f"{THINK}<answer>  </answer>", False),  # empty answer
        (f"{THINK}{THINK}<answer>18</answer>", False),  # duplicated reasoning block
        (f"{THINK}<answer>18</answer><answer>18</answer>", False),  # duplicated answer block
        ("<answer>18</answer>" + THINK, False),  # wrong order
        ("<think>x <answer>18</answer></think><answer>18</answer>", False),  # nested copy
        ("She has 9 eggs. 9 * 2 = 18.</think><answer>18</answer>", False),  # opening tag missing
        (f"{THINK}<answer>18", False),  # truncated
    ],
)
def test_format_full_match(completion: str, ok: bool, rows: dict[str, dict[str, str]]) -> None:
    reward = FormatReward(FormatParams())
    assert reward(sample(completion, rows["18"])) == (1.0 if ok else 0.0)


def test_format_prefilled_reasoning_tag(rows: dict[str, dict[str, str]]) -> None:
    strict = FormatReward(FormatParams())
    prefilled = FormatReward(FormatParams(prefilled_reasoning=True))
    no_opening = "She has 9 eggs, 9 * 2 = 18.\n</think>\n<answer>18</answer>"
    assert strict(sample(no_opening, rows["18"])) == 0.0  # would score 0 forever (Qwen3, R1)
    assert prefilled(sample(no_opening, rows["18"])) == 1.0
    assert prefilled(sample(f"{THINK}<answer>18</answer>", rows["18"])) == 1.0  # optional
    assert prefilled(sample(f"<think>{THINK}<answer>18</answer>", rows["18"])) == 0.0  # twice
    assert prefilled(sample(f"x {THINK}<answer>18</answer>", rows["18"])) == 0.0  # not at start
    assert prefilled(sample("</think><answer>18</answer>", rows["18"])) == 0.0  # empty reasoning


def test_format_per_tag_partial_credit(rows: dict[str, dict[str, str]]) -> None:
    approx = FormatReward(FormatParams(match_score=0.0, tag_score=0.5, tag_penalty=-0.5))
    row = rows["18"]
    assert approx(sample(f"{THINK}<answer>18</answer>", row)) == 2.0
    assert approx(sample(f"{THINK}<answer>18", row)) == 1.0  # 3 once, 1 missing
    assert approx(sample(f"{THINK}{THINK}<answer>18</answer>", row)) == 0.0  # 2 twice
    assert approx(sample("18", row)) == -2.0
    assert approx(sample(f"{THINK}<answer> </answer>", row)) == 0.0  # blank block earns nothing
    # the order is not checked by the partial credit, only by the full match
    assert approx(sample("<answer>18</answer><think>x</think>", row)) == 2.0
    both = FormatReward(FormatParams(match_score=1.0, tag_score=0.25, tag_penalty=-1.0))
    assert both(sample(f"{THINK}<answer>18</answer>", row)) == 2.0
    assert both(sample(f"{THINK}<answer>18</answer>junk", row)) == 1.0
    # prefilled: the opening tag is not scored either way (3 tags)
    prefilled = FormatReward(FormatParams(prefilled_reasoning=True, tag_score=0.5, match_score=0))
    assert prefilled(sample("x</think><answer>18</answer>", row)) == 1.5
    assert prefilled(sample("</think><answer>18</answer>", row)) == 1.0  # blank reasoning


def test_format_custom_tags_and_no_reasoning(rows: dict[str, dict[str, str]]) -> None:
    params = FormatParams(
        reasoning_start="<start_working_out>",
        reasoning_end="<end_working_out>",
        answer_start="<SOLUTION>",
        answer_end="</SOLUTION>",
        allow_text_between=True,
    )
    reward = FormatReward(params)
    ok = "<start_working_out>9*2<end_working_out>So:\n<SOLUTION>18</SOLUTION>"
    assert reward(sample(ok, rows["18"])) == 1.0
    assert reward(sample(ok.replace("SOLUTION>18", "SOLUTION>"), rows["18"])) == 0.0
    answer_only = FormatReward(FormatParams(reasoning_start=None, reasoning_end=None))
    assert answer_only(sample(" <answer>18</answer> ", rows["18"])) == 1.0
    assert answer_only(sample("x <answer>18</answer>", rows["18"])) == 0.0


GSM8K_LINE = r".+\n#### ?-?[0-9][0-9,]*(\.[0-9]+)?"


@pytest.mark.parametrize(
    ("completion", "ok"),
    [
        ("9 * 2 = 18\n#### 18", True),
        ("  9 * 2 = 18\n#### 1,800.5\n", True),  # whitespace around the whole completion
        ("#### 18", False),  # no working before the final line
        ("9 * 2 = 18\n#### 18\nThe answer is: 18", False),  # text after the final line
        ("9 * 2 = 18 #### 18", False),  # not on its own line
        ("9 * 2 = 18\n####", False),
    ],
)
def test_format_pattern_replaces_the_tag_layout(
    completion: str, ok: bool, rows: dict[str, dict[str, str]]
) -> None:
    reward = FormatReward(FormatParams(pattern=GSM8K_LINE, match_score=0.5))
    assert reward(sample(completion, rows["18"])) == (0.5 if ok else 0.0)
    assert reward(sample("<think>x</think><answer>18</answer>", rows["18"])) == 0.0


def test_format_params_validation() -> None:
    with pytest.raises(ValidationError, match="not a valid regex"):
        FormatParams(pattern="(unclosed")
    with pytest.raises(ValidationError, match="need the tag layout"):
        FormatParams(pattern=".*", tag_score=0.1)
    with pytest.raises(ValidationError, match="both reasoning_start and reasoning_end"):
        FormatParams(reasoning_start=None)
    with pytest.raises(ValidationError, match="prefilled_reasoning needs"):
        FormatParams(reasoning_start=None, reasoning_end=None, prefilled_reasoning=True)
    with pytest.raises(ValidationError, match="occurs inside tag"):
        FormatParams(answer_start="<a>", answer_end="<a>x")
    with pytest.raises(ValidationError, match="non-blank"):
        FormatParams(answer_end=" ")
    with pytest.raises(ValidationError, match="Extra inputs"):
        FormatParams(score=3.0)


# --------------------------------------------------------------------------- answer

CORRECT_STYLES = [
    "<answer>{g}</answer>",
    "<think>9 * 2 = 18</think><answer>{g}</answer>",
    "<answer>{g}.</answer>",
    "So the total is \\boxed{{{g}}}.",
    "Adding up ...\n#### {g}",
    "The answer is {g}.",
    "The final answer is ${g}$. I hope it is correct.",
    "Q: how much?\nA: {g}",
    "**Answer:** {g}",
    "After all that she has {g}",
    "<answer>{g} dollars</answer>",
]


@pytest.mark.parametrize("style", CORRECT_STYLES)
def test_answer_styles_on_real_rows(style: str, rows: dict[str, dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams())
    for gold, row in rows.items():
        assert reward(sample(style.format(g=gold), row)) == 1.0, (style, gold)
        wrong = str(int(gold.replace(",", "")) + 1)
        assert reward(sample(style.format(g=wrong), row)) == 0.0, (style, wrong)


@pytest.mark.parametrize(
    ("gold", "completion"),
    [
        ("1,080", "<answer>$1,080</answer>"),
        ("1,080", "<answer>1080</answer>"),
        ("1,080", "<answer>\\$1{,}080.00</answer>"),
        ("1,080", "He earns $1,080 in total. The answer is $1,080."),
        ("-3", "<answer>-3</answer>"),
        ("-3", "<answer>\u22123 degrees</answer>"),
        ("-3", "It was -3 degrees Celsius in the morning."),
        ("72", "The inner volume is 72."),
        ("72", "<answer>72 cubic inches</answer>"),
        ("18", "<answer>18 dollars</answer>"),
        ("18", "\\boxed{\\frac{36}{2}}"),
        ("18", "\\boxed{2 \\cdot 9}"),  # not a plain number: math-verify decides
        ("50", "<answer>50%</answer>"),
        ("50", "The dentist fixes 50 percent of his teeth. The answer is 50%"),
    ],
)
def test_answer_numeric_spellings(
    gold: str, completion: str, rows: dict[str, dict[str, str]]
) -> None:
    assert AnswerReward(AnswerParams())(sample(completion, rows[gold])) == 1.0


@pytest.mark.parametrize(
    ("gold", "completion"),
    [
        ("-3", "<answer>3</answer>"),  # the sign matters
        ("1,080", "<answer>1,08</answer>"),
        ("1,080", "<answer>108</answer>"),
        ("18", "\\boxed{7, 8}"),
        ("18", "<answer>18, 19</answer>"),  # two answers are not one
        ("18", "<think>Is it \\boxed{18}?</think>The answer is 19."),  # box in the reasoning
        ("50", "<answer>0.5</answer>"),  # 50% is 50 by default
    ],
)
def test_answer_wrong_spellings(
    gold: str, completion: str, rows: dict[str, dict[str, str]]
) -> None:
    assert AnswerReward(AnswerParams(wrong=-1.0))(sample(completion, rows[gold])) == -1.0


def test_answer_box_in_reasoning_vs_final_answer(rows: dict[str, dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams())
    row = rows["18"]
    assert reward(sample("<think>first guess \\boxed{17}</think>So \\boxed{18}", row)) == 1.0
    assert reward(sample("<think>first guess \\boxed{18}</think>The answer is 17", row)) == 0.0
    everywhere = AnswerReward(AnswerParams(after_reasoning=False))
    assert everywhere(sample("<think>first guess \\boxed{18}</think>The answer is 17", row)) == 1.0


def test_answer_fraction_and_symbolic_golds() -> None:
    """MATH-style golds (not in GSM8K): numeric where possible, math-verify otherwise."""
    reward = AnswerReward(AnswerParams(wrong=-1.0))
    half = {"answer": "\\frac{1}{2}"}
    assert reward(Sample("\\boxed{0.5}", row=half)) == 1.0
    assert reward(Sample("<answer>1/2</answer>", row=half)) == 1.0
    assert reward(Sample("\\boxed{\\dfrac{2}{4}}", row=half)) == 1.0
    assert reward(Sample("\\boxed{0.25}", row=half)) == -1.0
    assert reward(Sample("\\boxed{\\frac{1}{2}}", row={"answer": "0.5"})) == 1.0
    pi = {"answer": "7\\pi"}  # bare, this gold would parse as 7
    assert reward(Sample("\\boxed{7\\pi}", row=pi)) == 1.0
    assert reward(Sample("<answer>$7\\pi$</answer>", row=pi)) == 1.0
    assert reward(Sample("\\boxed{7}", row=pi)) == -1.0
    assert reward(Sample("\\boxed{4a-2}", row={"answer": "4a-2"})) == 1.0
    assert reward(Sample("\\boxed{4}", row={"answer": "4a-2"})) == -1.0
    assert reward(Sample("\\boxed{\\sqrt{2}}", row={"answer": "\\sqrt2"})) == 1.0
    pair = {"answer": "7, 8"}
    assert reward(Sample("\\boxed{7, 8}", row=pair)) == 1.0
    assert reward(Sample("\\boxed{7}", row=pair)) == -1.0


def test_answer_no_answer_and_unparseable_gold(rows: dict[str, dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams(no_answer=-2.0))
    assert reward(sample("I do not know.", rows["18"])) == -2.0
    assert reward(sample("<think>9 * 2 = 18</think>", rows["18"])) == -2.0  # nothing after it
    assert reward(Sample("\\boxed{18}", row={"answer": "#### "})) is None
    with pytest.raises(KeyError, match="no field 'solution'"):
        AnswerReward(AnswerParams(gold_field="solution"))(sample("18", rows["18"]))
    custom = AnswerReward(AnswerParams(gold_field="target"))
    assert custom(Sample("\\boxed{42}", row={"target": 42})) == 1.0


def test_answer_partial_credit_tiers(rows: dict[str, dict[str, str]]) -> None:
    params = AnswerParams(
        correct=3.0,
        wrong=-1.0,
        stripped_match=1.5,
        close=[{"rel_tol": 0.2, "score": 0.25}, {"rel_tol": 0.1, "score": 0.5}],
    )
    assert [t.rel_tol for t in params.close] == [0.1, 0.2]  # sorted, tightest first
    reward = AnswerReward(params)
    row = rows["1,080"]
    assert reward(sample("<answer>1,080</answer>", row)) == 3.0
    assert reward(sample("<answer> 1,080 </answer>", row)) == 1.5
    assert reward(sample("<answer>1,000</answer>", row)) == 0.5  # 7.4% off
    assert reward(sample("<answer>1188</answer>", row)) == 0.5  # exactly 10% off
    assert reward(sample("<answer>900</answer>", row)) == 0.25  # 16.7% off
    assert reward(sample("<answer>1,300</answer>", row)) == -1.0  # 20.4% off
    assert reward(sample("<answer>a lot</answer>", row)) == -1.0
    assert AnswerReward(AnswerParams())(sample("<answer> 1,080 </answer>", row)) == 1.0
    with pytest.raises(ValidationError, match="different rel_tol"):
        AnswerParams(close=[{"rel_tol": 0.1, "score": 1}, {"rel_tol": 0.1, "score": 2}])
    with pytest.raises(ValidationError, match="greater than 0"):
        AnswerParams(close=[{"rel_tol": 0, "score": 1}])
    with pytest.raises(ValidationError, match="timeout_seconds"):
        AnswerParams(timeout_seconds=0.5)


def test_answer_math_verify_path_needs_the_main_thread(rows: dict[str, dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams())
    results: dict[str, Any] = {}

    def run() -> None:
        results["numeric"] = reward(sample("<answer>18</answer>", rows["18"]))
        try:
            reward(sample("\\boxed{2 \\cdot 9}", rows["18"]))
        except RuntimeError as e:
            results["symbolic"] = str(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert results["numeric"] == 1.0  # the numeric path needs no signal
    assert "main thread" in results["symbolic"]


def test_answer_on_many_real_rows(test_rows: list[dict[str, str]]) -> None:
    reward = AnswerReward(AnswerParams(wrong=-1.0))
    for row in test_rows[:300]:
        gold = row["answer"].rsplit("####", 1)[1].strip()
        value = int(gold.replace(",", ""))
        assert reward(sample(f"<think>...</think><answer>{value:,}</answer>", row)) == 1.0
        assert reward(sample(f"The answer is ${value}.", row)) == 1.0
        assert reward(sample(row["answer"], row)) == 1.0  # the reference solution itself
        assert reward(sample(f"\\boxed{{{value - 1}}}", row)) == -1.0


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("gold", "completion", "score"),
    [
        ("1,080", "<answer>1,080</answer>", 1.0),  # float("1,080") broke the classic recipe
        ("1,080", "<answer>$1,080.00</answer>", 1.0),
        ("-3", "<answer>-3</answer>", 1.0),  # [\d\.]+ dropped the sign
        ("-3", "<answer>3</answer>", 0.0),
        ("72", "<answer>72.</answer>", 1.0),
        ("18", "<answer>She makes 18 dollars.</answer>", 1.0),
        ("18", "<answer>\\frac{36}{2}</answer>", 1.0),
        ("50", "<answer>50%</answer>", 1.0),
        ("18", "#### 18", 1.0),
        ("18", "The answer is 17", 0.0),
        ("18", "<answer>eighteen</answer>", -0.5),  # no number: no_answer
        ("18", "I cannot tell.", -0.5),
    ],
)
def test_numbers(gold: str, completion: str, score: float, rows: dict[str, dict[str, str]]) -> None:
    reward = NumbersReward(NumbersParams(no_answer=-0.5))
    assert reward(sample(completion, rows[gold])) == score


def test_numbers_position_and_tolerances(rows: dict[str, dict[str, str]]) -> None:
    row = rows["18"]
    text = "<answer>9 * 2 = 18</answer>"
    assert NumbersReward(NumbersParams())(sample(text, row)) == 1.0
    assert NumbersReward(NumbersParams(position="first"))(sample(text, row)) == 0.0
    assert NumbersReward(NumbersParams())(sample("<answer>18.0000001</answer>", row)) == 1.0
    assert NumbersReward(NumbersParams())(sample("<answer>18.01</answer>", row)) == 0.0
    loose = NumbersReward(NumbersParams(tolerance=0.05))
    assert loose(sample("<answer>18.01</answer>", row)) == 1.0
    relative = NumbersReward(NumbersParams(rel_tolerance=0.01))
    assert relative(sample("<answer>$1,090</answer>", rows["1,080"])) == 1.0  # 0.9% off
    assert relative(sample("<answer>$1,100</answer>", rows["1,080"])) == 0.0  # 1.9% off
    assert (
        NumbersReward(NumbersParams())(Sample("<answer>7</answer>", row={"answer": "\\pi"})) is None
    )
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        NumbersParams(tolerance=-1)


def test_numbers_anywhere_in_the_answer(rows: dict[str, dict[str, str]]) -> None:
    """#47's lenient score: the gold anywhere in the final answer, tags or not."""
    anywhere = NumbersReward(NumbersParams(strategies=("text",), position="any"))
    row = rows["18"]
    assert anywhere(sample("The calculator says 18, so 9 * 2 is that.", row)) == 1.0
    assert anywhere(sample("<answer>9 * 2 = 18</answer> (checked: 2 * 9)", row)) == 1.0
    assert anywhere(sample("It is 9 * 2 = 19.", row)) == 0.0
    assert anywhere(sample("I do not know.", row)) == 0.0  # no number: no_answer
    # the answer block first, then the whole text: a block without the gold is wrong
    block_first = NumbersReward(NumbersParams(strategies=("answer_tag", "text"), position="any"))
    assert block_first(sample("18 <answer>19</answer>", row)) == 0.0
    assert block_first(sample("18, no block", row)) == 1.0
    # the text after a closed reasoning block only, as every strategy
    assert anywhere(sample("<think>18?</think> It is 19.", row)) == 0.0
    with pytest.raises(ValidationError, match="text"):
        NumbersParams(strategies=("nonsense",))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="'first', 'last' or 'any'"):
        NumbersParams(position="middle")


def test_numbers_on_many_real_rows(test_rows: list[dict[str, str]]) -> None:
    reward = NumbersReward(NumbersParams(strategies=["answer_tag"]))
    for row in test_rows:
        gold = row["answer"].rsplit("####", 1)[1].strip()
        value = int(gold.replace(",", ""))
        assert reward(sample(f"<answer>The total is ${value:,}.</answer>", row)) == 1.0
        assert reward(sample(f"<answer>{-value if value else 1}</answer>", row)) == 0.0


# --------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("She sells 16 - 3 - 4 = 9 eggs for 9 * $2 = $18.\n#### 18", 1.0),
        ("16 * $5 = $72", 0.0),  # the base SmolLM2's own arithmetic
        ("2 * 2 = 4 and 4 * 2 = 9", 0.0),  # one wrong calculation is enough
        ("2 * (3 + 4) = 2 * 7 = 14", 1.0),  # a chain, link by link
        ("16 * 3 = 48 - 4 = 44", 0.0),  # running totals: 48 is not 44
        ("Total: $1,200 + $800 = $2,000", 1.0),  # thousands commas and dollars
        ("3 x 4 = 12, and 12 × 2 = 24, 24 ÷ 6 = 4", 1.0),
        ("20% * 50 = 10", 1.0),
        ("10 / 3 = 3.33", 1.0),  # rounded to the decimals written
        ("10 / 3 = 3.4", 0.0),
        ("7 / 2 = 3", 0.0),  # no rounding to an integer
        ("5 / 0 = 0", 0.0),
        ("-3 + 5 = 2", 1.0),  # a leading minus is a sign
        ("<<48/2=24>>24 clips", 1.0),  # GSM8K's calculator annotations
        ("3 eggs * 2 = 6", -1.0),  # text between numbers: nothing checkable
        ("x = 5, so the answer is 5", -1.0),  # no operator: not a calculation
        ("The answer is 18.", -1.0),
    ],
)
def test_arithmetic(completion: str, score: float, rows: dict[str, dict[str, str]]) -> None:
    reward = ArithmeticReward(ArithmeticParams(no_calculation=-1.0))
    assert reward(sample(completion, rows["18"])) == score


def test_arithmetic_reads_chains_as_written() -> None:
    text = "Step 1. 5 + 3 = 8 apples; 2x3=6; it is 12:30 = lunch; 2 * (3 + 4 = 14"
    assert written_calculations(text) == [["5 + 3", "8"], ["2 * 3", "6"], ["2 * (3 + 4", "14"]]
    # an expression that does not parse (unbalanced) is skipped, not scored wrong
    reward = ArithmeticReward(ArithmeticParams(no_calculation=-1.0))
    assert reward(sample("2 * (3 + 4 = 14", {})) == -1.0
    assert reward(sample("2 * (3 + 4 = 14 and 2 + 2 = 5", {})) == 0.0


def test_arithmetic_reads_pathological_text_in_bounded_time() -> None:
    """A long sum without "=" once backtracked exponentially (300 terms: hours); a number too
    long for a float is skipped, not an error. In a subprocess, so a regression fails here
    instead of hanging the run."""
    code = (
        "from rlvr.rewards.calculations import written_calculations, evaluate\n"
        "assert written_calculations('1' + ' +   1' * 300) == []\n"
        "chain = '1' + ' + 1' * 300\n"
        "assert written_calculations(chain + ' = 301') == [[chain, '301']]\n"
        "assert evaluate('9' * 400 + ' * 2') is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_arithmetic_passes_gsm8k_solutions_and_fails_them_corrupted(
    test_rows: list[dict[str, str]],
) -> None:
    """Every GSM8K test solution writes its calculations out; they hold, and changing one
    result by 1 makes the reward fail."""
    reward = ArithmeticReward(ArithmeticParams(no_calculation=-1.0))
    scores = [reward(sample(row["answer"], row)) for row in test_rows]
    checked = [s for s in scores if s != -1.0]
    assert len(checked) >= 0.95 * len(test_rows)
    assert sum(checked) >= 0.99 * len(checked)  # a few mixed numbers ("3 1/2") and slips
    corrupted = 0
    for row, score in zip(test_rows, scores, strict=True):
        m = re.search(r"<<[^=<>]*\d\s*[-+*/][^=<>]*=(\d+)>>", row["answer"])
        if score == 1.0 and m:
            text = row["answer"]
            wrong = text[: m.start(1)] + str(int(m.group(1)) + 1) + text[m.end(1) :]
            assert reward(sample(wrong, row)) == 0.0, row["answer"]
            corrupted += 1
    assert corrupted >= 0.9 * len(test_rows)


# --------------------------------------------------------------------------- steps


def test_results_are_the_values_reached_by_right_links() -> None:
    assert calculation_results("16 - 3 - 4 = 9 eggs, 9 * 2 = $18") == {9.0, 18.0}
    assert calculation_results("16 * 3 = 48 - 4 = 44") == {44.0}  # only the second link holds
    assert calculation_results("16 - 4 = 9") == set()  # wrong: reaches nothing
    assert calculation_results("40 * .01 = 0.4 and 1 / 2 = 50% and 1 / 2 = .50") == {0.4, 0.5}
    assert calculation_results("no calculation, 18") == set()


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        # Janet's ducks: the reference reaches {9, 18}
        ("She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = 18 dollars.\n#### 18", 1.0),
        ("She sells 16 - 3 - 4 = 9 eggs.\n#### 9", 0.5),  # one of two steps
        ("16 - 7 = 9 and 9 * 2 = 18", 1.0),  # another right way to the same values
        ("She makes 16 * 2 = 32 dollars.\n#### 32", 0.0),  # right arithmetic, not the steps
        ("16 - 4 = 9, 9 * 2 = 18", 0.5),  # a wrong calculation reaches nothing
        ("The answer is 18.\n#### 18", 0.0),  # no calculation
        # padding: 4 own results, 2 of them the reference's: 2 / max(2, 4)
        ("1 + 1 = 2, 2 + 1 = 3, 16 - 3 - 4 = 9, 9 * 2 = 18", 0.5),
    ],
)
def test_steps(completion: str, score: float, rows: dict[str, dict[str, str]]) -> None:
    assert StepsReward(StepsParams())(sample(completion, rows["18"])) == score


def test_steps_on_gsm8k_solutions(test_rows: list[dict[str, str]]) -> None:
    """Each GSM8K solution scores 1.0 against itself; against another question's solution,
    almost never; a row whose solution writes no calculation is not applicable (None)."""
    reward = StepsReward(StepsParams())
    scores = [reward(sample(row["answer"], row)) for row in test_rows]
    applicable = [s for s in scores if s is not None]
    assert len(applicable) >= 0.95 * len(test_rows)
    assert all(s == 1.0 for s in applicable)
    shifted = [reward(sample(a["answer"], b)) for a, b in itertools.pairwise(test_rows)]
    shifted = [s for s in shifted if s is not None]
    assert sum(shifted) / len(shifted) < 0.05


def test_steps_names_the_missing_field() -> None:
    with pytest.raises(KeyError, match="no field 'solution'.*it has: question"):
        StepsReward(StepsParams(gold_field="solution"))(sample("1 + 1 = 2", {"question": "?"}))


# --------------------------------------------------------------------------- length_penalty


@pytest.mark.parametrize(
    ("num_tokens", "expected"),
    [
        (0, 0.0),
        (3000, 0.0),
        (3072, 0.0),  # max_length - buffer: the ramp starts here
        (3073, -0.5 / 1024),
        (3584, -0.25),  # half way: (3072 - 3584) / 1024 * 0.5
        (4000, -0.453125),  # (3072 - 4000) / 1024 * 0.5
        (4095, -1023 / 2048),
        (4096, -0.5),
        (10_000, -0.5),
    ],
)
def test_overlong_penalty_formula(
    num_tokens: int, expected: float, rows: dict[str, dict[str, str]]
) -> None:
    reward = LengthPenaltyReward(LengthPenaltyParams(max_length=4096, buffer=1024, factor=0.5))
    assert reward(sample("x", rows["18"], num_tokens=num_tokens)) == pytest.approx(expected)


def test_length_penalty_needs_token_counts(rows: dict[str, dict[str, str]]) -> None:
    reward = LengthPenaltyReward(LengthPenaltyParams(max_length=10, buffer=5))
    assert reward(sample("a very long completion " * 100, rows["18"])) is None


def test_target_length_linear_and_cosine_are_clamped(rows: dict[str, dict[str, str]]) -> None:
    linear = LengthPenaltyReward(
        LengthPenaltyParams(mode="target", target_length=500, tolerance=200)
    )
    cosine = LengthPenaltyReward(
        LengthPenaltyParams(
            mode="target", target_length=500, tolerance=200, shape="cosine", factor=2
        )
    )

    def at(reward: LengthPenaltyReward, n: int) -> float | None:
        return reward(sample("x", rows["18"], num_tokens=n))

    assert at(linear, 500) == 0.0
    assert at(linear, 550) == pytest.approx(-0.25)
    assert at(linear, 400) == pytest.approx(-0.5)
    assert at(linear, 700) == -1.0
    assert at(linear, 5000) == -1.0
    assert at(linear, 0) == -1.0
    assert at(cosine, 500) == 0.0
    assert at(cosine, 600) == pytest.approx(-2 * (1 - math.cos(math.pi / 2)) / 2)  # -1.0
    assert at(cosine, 550) == pytest.approx(-(1 - math.cos(math.pi / 4)))
    values = [at(cosine, n) for n in range(500, 3000, 7)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # no rise past the max
    assert values[-1] == -2.0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "mode 'overlong' needs max_length and buffer"),
        ({"max_length": 100}, "needs buffer"),
        (
            {"max_length": 100, "buffer": 100},
            r"buffer \(100\) must be smaller than max_length \(100\)",
        ),
        ({"max_length": 100, "buffer": 0}, "greater than 0"),
        ({"max_length": 100, "buffer": 10, "factor": -1}, "greater than or equal to 0"),
        (
            {"max_length": 100, "buffer": 10, "target_length": 5},
            "target_length is used only by mode 'target'",
        ),
        (
            {"max_length": 100, "buffer": 10, "shape": "cosine"},
            "shape is used only by mode 'target'",
        ),
        ({"mode": "target", "target_length": 100}, "mode 'target' needs tolerance"),
        ({"mode": "target", "target_length": 100, "tolerance": 0}, "greater than 0"),
        (
            {"mode": "target", "target_length": 9, "tolerance": 9, "buffer": 2},
            "buffer is used only",
        ),
        ({"mode": "linear"}, "'overlong' or 'target'"),
    ],
)
def test_length_penalty_validation(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        LengthPenaltyParams(**params)


def test_length_penalty_params_round_trip_through_a_dump() -> None:
    """A saved config (every field written out, nulls included) must load again."""
    for params in (
        LengthPenaltyParams(max_length=4096, buffer=1024),
        LengthPenaltyParams(mode="target", target_length=300, tolerance=100, shape="cosine"),
    ):
        assert LengthPenaltyParams.model_validate(params.model_dump()) == params


# --------------------------------------------------------------------------- Unsloth recipe


@pytest.fixture(scope="module")
def unsloth() -> list[tuple[str, float, Any]]:
    """(label, weight, reward) for each entry of the example config, built from its params."""
    config = yaml.safe_load((ROOT / "examples/rewards/unsloth_gsm8k.yaml").read_text())
    records = registered()
    built = []
    for entry in config["rewards"]:
        record = records[entry["name"]]
        params = record.params.model_validate(entry["params"])
        built.append((entry["label"], entry["weight"], record.factory(params)))
    return built


def unsloth_scores(
    unsloth: list[tuple[str, float, Any]], completion: str, row: dict[str, str]
) -> dict[str, float]:
    return {label: reward(sample(completion, row)) for label, _, reward in unsloth}


def test_unsloth_config_shape(unsloth: list[tuple[str, float, Any]]) -> None:
    labels = [label for label, _, _ in unsloth]
    assert labels == ["format_exact", "format_approx", "answer", "numbers"]
    assert len(set(labels)) == len(labels)


def test_unsloth_recipe_totals(
    unsloth: list[tuple[str, float, Any]], rows: dict[str, dict[str, str]]
) -> None:
    work = "<start_working_out>Let me compute step by step.<end_working_out>"
    cases = [
        # (row, completion, expected per reward: format_exact, format_approx, answer, numbers)
        (rows["18"], f"{work}<SOLUTION>18</SOLUTION>", (3.0, 2.0, 3.0, 1.5)),  # 9.5
        (rows["1,080"], f"{work}<SOLUTION>1,080</SOLUTION>", (3.0, 2.0, 3.0, 1.5)),  # comma: 9.5
        (rows["1,080"], f"{work}<SOLUTION>$1,080</SOLUTION>", (3.0, 2.0, 3.0, 1.5)),
        (rows["-3"], f"{work}<SOLUTION>-3</SOLUTION>", (3.0, 2.0, 3.0, 1.5)),  # sign: 9.5
        (rows["-3"], f"{work}<SOLUTION>3</SOLUTION>", (3.0, 2.0, -1.0, 0.0)),  # 4.0
        (rows["18"], f"{work}<SOLUTION> 18 </SOLUTION>", (3.0, 2.0, 1.5, 1.5)),  # stripped: 8.0
        (rows["18"], f"{work}<SOLUTION>17</SOLUTION>", (3.0, 2.0, 0.5, 0.0)),  # 5.6% off: 5.5
        (rows["18"], f"{work}<SOLUTION>15</SOLUTION>", (3.0, 2.0, 0.25, 0.0)),  # 16.7% off
        (rows["18"], f"{work}<SOLUTION>12</SOLUTION>", (3.0, 2.0, -1.0, 0.0)),
        (rows["18"], f"{work}\nSo:\n<SOLUTION>18</SOLUTION>\n", (3.0, 2.0, 3.0, 1.5)),
        (rows["18"], f"{work}<SOLUTION>18 - 0 = 18</SOLUTION>", (3.0, 2.0, 3.0, 1.5)),
        (
            rows["18"],
            f"{work}<SOLUTION>18</SOLUTION>\njunk <SOLUTION>2</SOLUTION>",
            (0.0, 0.0, -1.0, 0.0),
        ),
        (rows["18"], f"{work}<SOLUTION></SOLUTION>", (0.0, 0.0, 0.0, 0.0)),  # empty block
        (rows["18"], f"{work}The answer is 18.", (0.0, 0.0, 0.0, 0.0)),  # no block
        (rows["18"], "<SOLUTION>18</SOLUTION>", (0.0, 0.0, 3.0, 1.5)),  # no working out
    ]
    for row, completion, expected in cases:
        scores = unsloth_scores(unsloth, completion, row)
        assert tuple(scores.values()) == expected, (completion, scores)
        total = sum(weight * scores[label] for label, weight, _ in unsloth)
        assert total == pytest.approx(sum(expected))
