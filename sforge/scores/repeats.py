"""Repeats on the leaderboard: `sforge run --repeat N` makes each repeat its own source (a
leaderboard row). Here the sources of one (agent, model) are taken as repeats of one
experiment: the mean of their overall scores with a 95 % confidence interval (Student's t
over the repeats), best-of-n, and pass@k per the unbiased estimator of Chen et al. 2021,
"Evaluating Large Language Models Trained on Code" (HumanEval).

A task is *solved* by a repeat when that repeat's rescaled best on it is 100 (full marks,
SOLVED_AT). pass@k of a group is the mean over the ranked tasks of 1 − C(n−c, k)/C(n, k),
with n the group's repeats and c those that solved the task: the chance that at least one of
k repeats drawn without replacement solves it. best-of-n is the leaderboard mean of the
per-task maximum over the n repeats (what picking the best repeat per task would score).
Sources without an agent (uploads by hand) are not repeats of anything and are left out.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sforge.benchmark.model import Benchmark
from sforge.scores.leaderboard import score_grid
from sforge.scores.tables import empty_table, write_csv

SOLVED_AT = 100.0  # a rescaled best this high solves a task
PASS_K = (1, 3, 5, 10)  # pass@k columns; empty where a group has fewer than k repeats
CONFIDENCE = 0.95

REPEATS_COLUMNS: dict[str, str] = {
    "agent": "str",
    "model": "str",
    "repeats": "int64",  # n: the group's sources
    "mean": "float64",  # of the repeats' overall scores
    "sd": "float64",  # their sample standard deviation (n − 1); empty for one repeat
    "ci95_low": "float64",  # mean ∓ t(0.975, n − 1) · sd / √n; empty for one repeat
    "ci95_high": "float64",
    "best_of_n": "float64",
    **{f"pass@{k}": "float64" for k in PASS_K},
    "tasks": "int64",  # ranked tasks the means are over
    "sources": "str",  # the group's sources, comma-joined
}


# --------------------------------------------------------------------------- statistics
def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c are correct (Chen et al. 2021):
    1 − C(n−c, k)/C(n, k); 1 when every draw of k must hold a correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            out *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return out


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with df degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df degrees of freedom (bisection on t_cdf; no
    scipy in sforge's dependencies)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def mean_ci(values: list[float], confidence: float = CONFIDENCE
            ) -> tuple[float, float | None, float | None, float | None]:
    """(mean, sample sd, low, high) of `values`: the t interval over them; no sd or interval
    for a single value."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None, None, None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


# --------------------------------------------------------------------------- the table
def repeat_rows(bench: Benchmark, board: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """One row per (agent, model) of the leaderboard's sources with an agent: its repeats'
    mean with a 95 % interval, best-of-n and pass@k (module doc); best mean first."""
    with_agent = board[board["agent"].notna() & (board["agent"] != "")]
    if not len(with_agent) or not len(bench.ranked_tasks):
        return empty_table(REPEATS_COLUMNS)
    keys = list(zip(with_agent["agent"].astype(str),
                    with_agent["model"].where(with_agent["model"].notna(), "").astype(str),
                    strict=True))
    groups: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for (agent, model), source, score in zip(keys, with_agent["source"], with_agent["score"],
                                             strict=True):
        value = 0.0 if score is None or pd.isna(score) else float(score)
        groups.setdefault((agent, model), []).append((str(source), value))
    grid = score_grid(bench, best, pd.Index(sorted(with_agent["source"]), dtype="str"))
    rows = []
    for (agent, model), members in groups.items():
        members.sort()
        sources = [s for s, _ in members]
        mean, sd, low, high = mean_ci([v for _, v in members])
        part = grid.loc[sources].to_numpy()
        n = len(sources)
        solved = (part >= SOLVED_AT).sum(axis=0)
        row: dict[str, object] = {
            "agent": agent, "model": model or None, "repeats": n, "mean": mean, "sd": sd,
            "ci95_low": low, "ci95_high": high, "best_of_n": float(part.max(axis=0).mean()),
            "tasks": part.shape[1], "sources": ",".join(sources)}
        for k in PASS_K:
            row[f"pass@{k}"] = float(np.mean([pass_at_k(n, int(c), k) for c in solved])) \
                if k <= n else None
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(REPEATS_COLUMNS))
    frame = frame.sort_values(["mean", "agent", "model"], ascending=[False, True, True],
                              ignore_index=True, na_position="last")
    return frame.astype(REPEATS_COLUMNS)


def write_repeats(bench: Benchmark, board: pd.DataFrame, best: pd.DataFrame,
                  out_csv: Path) -> pd.DataFrame:
    """leaderboard_repeats.csv from the leaderboard and best.csv; → its rows."""
    frame = repeat_rows(bench, board, best)
    write_csv(frame, Path(out_csv))
    return frame
