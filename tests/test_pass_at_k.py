"""rlvr.functional.pass_at_k: the unbiased pass@k estimator, against hand-computed values and a
brute-force enumeration of every draw."""

from __future__ import annotations

import itertools
import math

import pytest

from rlvr.functional import mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 1, 0.0),
        (5, 0, 5, 0.0),
        (5, 4, 2, 1.0),  # n - c < k: every draw of 2 holds a correct one
        (5, 5, 1, 1.0),
        (1, 1, 1, 1.0),
        (10, 3, 4, 1 - 35 / 210),
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_probability_over_draws():
    """pass@k is the fraction of k-subsets of the n samples holding a correct one."""
    for n in range(1, 7):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(samples, k))
                brute = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
    # pass@1 is the success rate; large n stays exact and in [0, 1]
    assert pass_at_k(200, 37, 1) == pytest.approx(37 / 200)
    assert 0.0 <= pass_at_k(1000, 1, 10) <= 1.0


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_prompts():
    # prompt 1: 1 - C(3,2)/C(5,2) = 0.7; prompt 2: no correct sample, 0
    assert mean_pass_at_k([(5, 2), (5, 0)], 2) == pytest.approx(0.35)
    assert math.isnan(mean_pass_at_k([], 1))
