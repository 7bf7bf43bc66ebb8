"""Play the held-out products (``data/test.jsonl``) with a model, greedily, and report how often
it calls the calculator and how often its final answer is right.

    python examples/calculator/heldout.py examples/models/tiny-calculator      # before RL
    python examples/calculator/heldout.py outputs/calculator/checkpoint-60      # after

The held-out products are disjoint from the warm-up's and the training split's, so a model
right on them got there by calling the tool, not by remembering products. The episode is the
``tools`` environment's: the calculator's schema in the chat template's ``tools``, each call
answered by a ``tool`` message, the first answer without a call ending it (at most
``MAX_TURNS`` turns). Conversations are re-rendered turn by turn, which for this model's chat
template gives the tokens training used.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from make_model import calculator_tool  # this directory: run as a script

from rlvr.plugin import parse_tool_calls

HERE = Path(__file__).resolve().parent
MAX_TURNS = 3
ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def play(
    model_dir: str | Path, rows: list[dict[str, str]], max_new_tokens: int = 32
) -> dict[str, float]:
    """Greedy episodes of ``rows``: ``{"accuracy", "tool_call_rate", "turns"}``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    calculator, schema = calculator_tool()
    tools = [schema]
    convs: list[list[dict[str, Any]]] = [[{"role": "user", "content": r["question"]}] for r in rows]
    called = [False] * len(rows)
    turns = [0] * len(rows)
    live = list(range(len(rows)))
    for _ in range(MAX_TURNS):
        if not live:
            break
        texts = [
            tok.apply_chat_template(
                convs[k], tools=tools, tokenize=False, add_generation_prompt=True
            )
            for k in live
        ]
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        still = []
        for k, ids in zip(live, out[:, batch["input_ids"].shape[1] :], strict=True):
            text = tok.decode(ids, skip_special_tokens=True)
            turns[k] += 1
            calls = parse_tool_calls(text)
            convs[k].append({"role": "assistant", "content": text})
            if not calls:
                continue
            called[k] = True
            for call in calls:
                try:
                    result = calculator(**call["function"]["arguments"])
                except TypeError as exc:
                    result = f"error: bad arguments: {exc}"
                convs[k].append({"role": "tool", "name": "calculator", "content": result})
            still.append(k)
        live = still
    right = 0
    for conv, r in zip(convs, rows, strict=True):
        m = ANSWER.search(conv[-1]["content"]) if conv[-1]["role"] == "assistant" else None
        right += bool(m and m.group(1) == r["answer"])
    n = len(rows)
    return {"accuracy": right / n, "tool_call_rate": sum(called) / n, "turns": sum(turns) / n}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model directory or a run's checkpoint-N")
    parser.add_argument("--data", type=Path, default=HERE / "data" / "test.jsonl")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    lines = args.data.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    got = play(args.model, rows)
    print(
        f"{args.model}: {len(rows)} products, accuracy {got['accuracy']:.3f}, "
        f"tool-call rate {got['tool_call_rate']:.3f}, turns {got['turns']:.2f}"
    )


if __name__ == "__main__":
    main()
