"""Build the quickstart's tiny model and data set, offline and deterministically, in seconds.

    python examples/quickstart/make_model.py     # writes examples/models/tiny-arith/
                                                 # and examples/quickstart/data/{train,test}.jsonl

The task: single-digit addition whose sum is a single digit, asked as "What is 3 + 4?" (row
field ``question``), gold answer "7" (row field ``answer``). There are 55 such questions.
``train.jsonl`` repeats them so that every answer 0-9 is equally common (10 rows each, 100
rows): with the plain 55 questions, "9" is the right answer for 10 of them and "0" for one, and
RL first learns to answer "9" to everything, a local optimum it leaves slowly.
``test.jsonl`` holds the 55 questions once each.

The model: a random-init tiny Qwen2 from :func:`rlvr.model.tiny.build_tiny_model` (head_dim 64,
so vLLM's CPU backend loads it too; untied input/output embeddings) with a BPE tokenizer trained
on the task's text, so that every digit, ``<answer>`` and ``</answer>`` is one token. Then:

1. every weight matrix is re-drawn from N(0, 0.1^2) instead of Qwen2's N(0, 0.02^2): with 0.02
   the attention of so small a model starts out flat and takes hundreds of steps to find the
   two digits of the question, even with supervised labels; with 0.1 it takes tens;
2. a warm start teaches the answer FORMAT only: the output layer (``lm_head``, nothing else) is
   fitted so that after the chat prompt the model writes ``<answer>``, then a digit drawn
   uniformly at random (the target is the uniform distribution over 0-9, whatever the
   question), then ``</answer>`` and ``<|im_end|>``. Only the output layer is trained because
   fitting the whole network to random digits teaches it to ignore the question, which makes
   the task much slower to learn afterwards.

The warm-started policy answers in the right format and is right only by chance (about 1 in
10); reinforcement learning (``rlvr train examples/quickstart.yaml``) has to learn the addition.

Everything is seeded and runs on one thread, so the files written are the same on every run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_DIR = HERE.parent / "models" / "tiny-arith"
DEFAULT_DATA_DIR = HERE / "data"

MODEL_KWARGS = dict(
    vocab_size=300,
    hidden_size=64,
    num_layers=2,
    head_dim=64,
    intermediate_size=256,
    tie_word_embeddings=False,
)
INIT_STD = 0.1
WARM_START = dict(steps=300, lr=2e-2)


def questions() -> list[dict[str, str]]:
    """Every "What is a + b?" with single digits a, b and a + b <= 9 (55 questions)."""
    return [
        {"question": f"What is {a} + {b}?", "answer": str(a + b)}
        for a in range(10)
        for b in range(10)
        if a + b <= 9
    ]


def balanced(rows: list[dict[str, str]], per_answer: int = 10) -> list[dict[str, str]]:
    """``per_answer`` rows for each answer, cycling through the questions that have it."""
    by_answer: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_answer.setdefault(row["answer"], []).append(row)
    return [
        group[k % len(group)] for _, group in sorted(by_answer.items()) for k in range(per_answer)
    ]


def corpus(rows: list[dict[str, str]]) -> list[str]:
    """Text the tokenizer is trained on: the questions and answers in the answer format."""
    lines = ["0 1 2 3 4 5 6 7 8 9 + - = ?", "user assistant system"]
    lines += [f"{r['question']} <answer>{r['answer']}</answer>" for r in rows]
    return lines * 2  # BPE merges a pair only when it appears at least twice


def write_data(rows: list[dict[str, str]], data_dir: Path, seed: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    train = balanced(rows)
    random.Random(seed).shuffle(train)
    for name, split in (("train.jsonl", train), ("test.jsonl", rows)):
        with open(data_dir / name, "w", encoding="utf-8") as f:
            for row in split:
                f.write(json.dumps(row) + "\n")


def warm_start(model_dir: Path, rows: list[dict[str, str]], seed: int) -> dict[str, float]:
    """Re-initialise the weights, fit ``lm_head`` to the format (see the module docstring),
    save; returns the format's probabilities under the result (averaged over questions)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids_of = tok.convert_tokens_to_ids
    digits = [ids_of(str(d)) for d in range(10)]
    start, end, eos = ids_of("<answer>"), ids_of("</answer>"), ids_of(tok.eos_token)
    for d in range(10):  # the answer format is 3 tokens when tokenised as plain text
        got = tok(f"<answer>{d}</answer>", add_special_tokens=False)["input_ids"]
        assert got == [start, digits[d], end], (d, got)

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.dim() == 2:
                param.normal_(0.0, INIT_STD, generator=g)

    # Every question followed by every digit: <prompt> <answer> d </answer> <eos>, left-padded
    # like the prompts at generation time. The body is frozen, so its hidden states are
    # computed once.
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": r["question"]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for r in rows
    ]
    seqs = [
        tok(p, add_special_tokens=False)["input_ids"] + [start, digits[d], end, eos]
        for p in prompts
        for d in range(10)
    ]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    attn = torch.zeros_like(ids)
    for k, seq in enumerate(seqs):
        ids[k, width - len(seq) :] = torch.tensor(seq)
        attn[k, width - len(seq) :] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        hidden = model.model(input_ids=ids, attention_mask=attn, position_ids=pos)
        hidden = hidden.last_hidden_state[:, -5:-1]  # predicting <answer>, d, </answer>, eos
    n = len(seqs)
    targets = torch.zeros(n, 4, model.config.vocab_size)
    targets[:, 0, start] = 1.0
    targets[:, 1, digits] = 0.1  # uniform over the digits: the format, not the answer
    targets[:, 2, end] = 1.0
    targets[:, 3, eos] = 1.0

    head = model.lm_head
    opt = torch.optim.Adam(head.parameters(), lr=WARM_START["lr"])
    for _ in range(WARM_START["steps"]):
        logp = head(hidden).log_softmax(-1)
        loss = -(targets * logp).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(model_dir, safe_serialization=True)

    with torch.no_grad():
        p = head(hidden).softmax(-1)
    return {
        "p(<answer>)": p[:, 0, start].mean().item(),
        "p(digit)": p[:, 1, digits].sum(-1).mean().item(),
        "p(</answer>)": p[:, 2, end].mean().item(),
        "p(eos)": p[:, 3, eos].mean().item(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from rlvr import build_tiny_model

    t0 = time.perf_counter()
    torch.set_num_threads(1)  # the same bytes whatever the core count
    rows = questions()
    write_data(rows, args.data_dir, args.seed)
    if args.model_dir.exists():
        shutil.rmtree(args.model_dir)
    build_tiny_model(args.model_dir, seed=args.seed, corpus=corpus(rows), **MODEL_KWARGS)
    probs = warm_start(args.model_dir, rows, args.seed)
    shown = ", ".join(f"{k} {v:.3f}" for k, v in probs.items())
    print(f"wrote {args.model_dir} ({shown})")
    print(f"wrote {args.data_dir}/train.jsonl and test.jsonl ({len(rows)} questions)")
    print(f"done in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
