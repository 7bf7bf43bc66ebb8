"""Written calculations in text: find the chains ``e1 = e2 [= e3 ...]`` and check each link.

Shared by the rewards that read a completion's arithmetic (``arithmetic``: is every calculation
right; ``steps``: does it reach the reference solution's intermediate results).

A calculation is a chain of arithmetic expressions (numbers, ``+ - * /``, ``x``/``×`` between
numbers, ``÷``, parentheses, ``%`` as hundredths; ``$`` and thousands commas are ignored) in
which at least one expression has an operator; ``2 * (3 + 4) = 2 * 7 = 14`` is one chain,
checked link by link (so the running-total habit ``16 * 3 = 48 - 4 = 44`` is wrong: 48 is not
44). Text between numbers ends an expression, so ``3 eggs * 2 = 6`` leaves only ``2 = 6``, which
has no operator and is not a calculation: what cannot be read exactly is skipped, never
guessed. A link holds when the two sides are equal, or, when the right side is a plain number
with ``d >= 1`` decimals, when the left side rounds to it at ``d`` decimals (``10 / 3 = 3.33``);
``%`` may also be a mere label (``18 / 450 * 100 = 4%``). ``7 / 2 = 3`` is wrong; a division by
zero is wrong. A chain right after an operator (``15 pages x 1/3 = 5``) is skipped: its left
side began before the words. GSM8K's calculator annotations (``<<60/3=20>>``) are calculations
of their own.
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
import re

_NUM = r"(?:\d+(?:\.\d+)?|\.\d+)%?"
# Spaces belong to exactly one place (around an operator or a parenthesis, after a sign): with
# two adjacent optional runs of spaces, a long "1 + 1 + ..." without "=" backtracks
# exponentially.
_TERM = rf"(?:\(\s*)*(?:-\s*)?{_NUM}(?:\s*\))*"
_EXPR = rf"{_TERM}(?:\s*[-+*/]\s*{_TERM})*"
_CHAIN = re.compile(rf"(?<![\w.]){_EXPR}(?:\s*=\s*{_EXPR})+")
_TIMES = re.compile(r"(?<=\d)\s*[x×X]\s*(?=\(?\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_OPERATOR = re.compile(r"\d%?\s*[-+*/]\s*\(*\s*-?\s*\.?\d")
_CUT = re.compile(r"(?:[-+*/(×]|(?<![A-Za-z])[xX])\s*$")
_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def written_calculations(text: str) -> list[list[str]]:
    """The calculation chains in ``text``, each as its expressions in order (normalised)."""
    s = text.replace("$", "").replace("\\", "").replace("÷", "/").replace("·", "*")
    s = _TIMES.sub(" * ", _THOUSANDS.sub("", s))
    # GSM8K's calculator annotations ("3 = <<60/3=20>>20") are calculations of their own
    annotations = _ANNOTATION.findall(s)
    s = "\n".join([_ANNOTATION.sub(" ", s), *annotations])
    chains = []
    for m in _CHAIN.finditer(s):
        if _CUT.search(s, max(0, m.start() - 3), m.start()):
            continue  # "15 pages x 1/3 = 5": the left side starts before the words
        parts = [p.strip() for p in m.group(0).split("=")]
        if any(_OPERATOR.search(p) for p in parts):
            chains.append(parts)
    return chains


def evaluate(expression: str) -> float | None:
    """The value of a normalised arithmetic expression; ``None`` when it does not parse.

    Raises ``ZeroDivisionError`` on a division by zero. Only numbers and ``+ - * /`` are
    evaluated (an ``ast`` walk, never ``eval``), all in floats.
    """
    try:
        return _value(ast.parse(expression.replace("%", "*0.01"), mode="eval").body)
    except (SyntaxError, ValueError, OverflowError):  # unbalanced; too many digits for a float
        return None


#: :func:`evaluate` under the name rlvr's public API gives it (``rlvr.evaluate`` runs an eval).
evaluate_arithmetic = evaluate


def _value(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _value(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        return None if left is None or right is None else _BINARY[type(node.op)](left, right)
    return None


def link_holds(left: str, right: str) -> bool | None:
    """Does ``left = right`` hold (see the module docstring)? ``None``: it does not parse."""
    if "%" in left + right and link_holds(left.replace("%", ""), right.replace("%", "")):
        return True  # "18 / 450 * 100 = 4%": the percent sign as a label
    try:
        a, b = evaluate(left), evaluate(right)
    except ZeroDivisionError:
        return False
    if a is None or b is None:
        return None
    decimals = re.fullmatch(r"-?\s*\d*\.(\d+)", right)
    if decimals:
        return abs(a - b) <= 0.5 * 10 ** -len(decimals.group(1)) + 1e-9
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def calculation_results(text: str) -> set[float]:
    """The distinct values that ``text``'s calculations reach by a link that holds.

    ``16 - 3 - 4 = 9`` gives {9}; ``16 * 3 = 48 - 4 = 44`` gives {44} (only the second link holds);
    a wrong calculation gives nothing. Values are rounded to 9 decimals so that equal numbers
    written differently (``0.5``, ``.50``, ``50%``) are one value.
    """
    reached = set()
    for chain in written_calculations(text):
        for left, right in itertools.pairwise(chain):
            if link_holds(left, right):
                value = evaluate(right)
                if value is not None:
                    reached.add(round(value, 9))
    return reached
