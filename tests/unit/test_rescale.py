"""The twelve rescale kinds of docs/rescale.md, exact to 1e-9.

Every expected value is written out by hand from the documented formula, never taken from
sforge.benchmark.rescaling, so a wrong formula in the implementation cannot also be the expectation.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sforge import rescale
from sforge.benchmark.loader import load_benchmark
from sforge.benchmark.rescaling import KINDS, RescaleError, validate
from tests.helpers.paths import REPO

TOL = 1e-9


def close(got: float | None, want: float) -> bool:
    return got is not None and abs(got - want) <= TOL


def check(table: dict, cases: list[tuple[float, float]]) -> None:
    for raw, want in cases:
        got = rescale(table, raw)
        assert close(got, want), f"{table['kind']} r={raw}: got {got}, want {want}"


# --------------------------------------------------------------------------- the public name
def test_rescale_is_a_documented_function():
    """`from sforge import rescale` is a plain function: help() shows its signature and
    every kind with its parameters and formula."""
    import inspect
    import pydoc

    from sforge import rescale as fn

    assert inspect.isfunction(fn)
    assert str(inspect.signature(fn)) == \
        "(table: 'Mapping[str, object] | None', raw: 'float | None') -> 'float | None'"
    assert fn({"kind": "linear", "lower": 0, "upper": 10}, 5) == 50.0
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    for name, kind in KINDS.items():
        assert f"{name}({', '.join(kind.params)})" in text, name
    import sforge.benchmark.rescaling as mod

    assert mod.rescale is fn and mod.validate is validate


def test_all_twelve_kinds_are_known():
    assert set(KINDS) == {
        "linear", "min_linear", "min_linear_positive", "min_inverse_anchor",
        "compression_ratio_cropped_guarded", "log_anchor", "log_max", "log1p_max", "log_min",
        "piecewise_max", "piecewise_min", "piecewise_log_min",
    }


# --------------------------------------------------------------------------- the worked example
PW = {"kind": "piecewise_max", "baseline": 0.0, "rank30": 47169682940.0,
      "rank1": 49702568341.0, "super_anchor": 5e10}


def test_worked_examples_of_rescale_md():
    got = rescale(PW, 43623268300)
    # 20·(r−B)/(R30−B) = 18.4963161001…: exact by the formula. The published example
    # prints "18.4962…", 1.2e-4 below the formula's own value; the formula wins.
    assert close(got, 20 * (43623268300 - 0) / (47169682940 - 0))
    assert close(got, 18.496316100105634)
    assert abs(got - 18.4962) < 2e-4
    assert close(rescale(PW, 49702568341), 80.0)
    assert close(rescale(PW, 6e10), 100.0)
    assert close(rescale(PW, -1), 0.0)


# --------------------------------------------------------------------------- linear kinds
def test_linear():
    t = {"kind": "linear", "lower": 10.0, "upper": 30.0}
    check(t, [(10, 0), (30, 100), (20, 50), (15, 100 * 5 / 20), (0, 0), (-1e9, 0), (31, 100),
              (1e300, 100)])
    # a reversed range is allowed and still linear: lower scores 100 at... upper
    r = {"kind": "linear", "lower": 30.0, "upper": 10.0}
    check(r, [(10, 100), (30, 0), (25, 100 * (25 - 30) / (10 - 30))])


def test_min_linear():
    t = {"kind": "min_linear", "baseline": 100.0, "expert": 20.0}
    check(t, [(100, 0), (20, 100), (60, 50), (90, 100 * (100 - 90) / (100 - 20)), (150, 0),
              (0, 100), (-5, 100)])


def test_min_linear_positive_guards():
    t = {"kind": "min_linear_positive", "baseline": 100.0, "expert": 20.0}
    check(t, [(0, 0), (-3, 0), (1e-12, 100), (20, 100), (100, 0),
              (70, 100 * (100 - 70) / (100 - 20)), (500, 0)])
    # B = E is a guard (score 0), not a degenerate set
    eq = {"kind": "min_linear_positive", "baseline": 5.0, "expert": 5.0}
    validate(eq)
    check(eq, [(1, 0), (5, 0), (9, 0)])


def test_min_inverse_anchor():
    t = {"kind": "min_inverse_anchor", "anchor_raw": 2.0, "anchor_score": 50.0}
    check(t, [(2, 50), (4, 50 * 2 / 4), (1, 100), (0.5, 100), (0, 0), (-1, 0), (1e9, 50 * 2 / 1e9),
              (3, 50 * 2 / 3)])
    check({"kind": "min_inverse_anchor", "anchor_raw": 0.0, "anchor_score": 50.0}, [(1, 0)])
    check({"kind": "min_inverse_anchor", "anchor_raw": -2.0, "anchor_score": 50.0}, [(1, 0)])


def test_compression_ratio_cropped_guarded():
    t = {"kind": "compression_ratio_cropped_guarded", "baseline": 1.0, "expert": 0.2}
    check(t, [(0.0, 0), (0.049999, 0), (-1, 0), (0.05, 100), (0.2, 100), (1.0, 0), (1.5, 0),
              (0.6, 100 * (1.0 - 0.6) / (1.0 - 0.2)), (0.3, 100 * (1.0 - 0.3) / (1.0 - 0.2))])
    eq = {"kind": "compression_ratio_cropped_guarded", "baseline": 0.5, "expert": 0.5}
    validate(eq)
    check(eq, [(0.4, 0), (0.6, 0)])


# --------------------------------------------------------------------------- log kinds
def test_log_anchor():
    t = {"kind": "log_anchor", "anchor_raw": 1000.0, "anchor_score": 60.0}
    check(t, [(1, 0), (0.5, 0), (-4, 0), (1000, 60), (10, 60 * math.log(10) / math.log(1000)),
              (1e5, 100), (1.0000001, 60 * math.log(1.0000001) / math.log(1000))])
    check({"kind": "log_anchor", "anchor_raw": 1.0, "anchor_score": 60.0}, [(10, 0)])
    check({"kind": "log_anchor", "anchor_raw": 0.5, "anchor_score": 60.0}, [(10, 0)])


def test_log_max():
    t = {"kind": "log_max", "baseline": 10.0, "expert": 1000.0}
    check(t, [(10, 0), (1000, 100), (100, 50), (5, 0), (1e6, 100), (0, 0), (-1, 0),
              (31.6, 100 * math.log(31.6 / 10) / math.log(1000 / 10))])
    for b, e in ((0.0, 10.0), (-1.0, 10.0), (10.0, 0.0), (10.0, -5.0), (7.0, 7.0)):
        check({"kind": "log_max", "baseline": b, "expert": e}, [(50, 0)])


def test_log1p_max():
    t = {"kind": "log1p_max", "baseline": 5.0, "upper": 500.0}
    d = math.log(1 + 500 / 5)
    check(t, [(500, 100), (1000, 100), (0, 0), (-1, 0), (5, 100 * math.log(1 + 5 / 5) / d),
              (50, 100 * math.log(1 + 50 / 5) / d), (1e-3, 100 * math.log1p(1e-3 / 5) / d)])
    for b, u in ((0.0, 5.0), (-1.0, 5.0), (5.0, 0.0), (5.0, -1.0)):
        check({"kind": "log1p_max", "baseline": b, "upper": u}, [(3, 0)])


def test_log_min():
    t = {"kind": "log_min", "baseline": 1000.0, "expert": 10.0}
    check(t, [(1000, 0), (10, 100), (100, 50), (5000, 0), (1, 100), (0, 0), (-2, 0),
              (300, 100 * math.log(1000 / 300) / math.log(1000 / 10))])
    for b, e in ((0.0, 10.0), (1000.0, 0.0), (-5.0, 10.0), (4.0, 4.0)):
        check({"kind": "log_min", "baseline": b, "expert": e}, [(3, 0)])


# --------------------------------------------------------------------------- piecewise kinds
def test_piecewise_max_segments():
    b, r30, r1, s = 10.0, 50.0, 90.0, 100.0
    t = {"kind": "piecewise_max", "baseline": b, "rank30": r30, "rank1": r1, "super_anchor": s}
    check(t, [
        (b, 0), (5, 0), (-100, 0),
        (r30, 20), (r1, 80), (s, 100), (1e9, 100),
        (30, 20 * (30 - b) / (r30 - b)),
        (70, 20 + 60 * (70 - r30) / (r1 - r30)),
        (95, 80 + 20 * (95 - r1) / (s - r1)),
        (10.000001, 20 * (10.000001 - b) / (r30 - b)),
    ])


def test_piecewise_max_negative_raws_allowed():
    t = {"kind": "piecewise_max", "baseline": -100.0, "rank30": -50.0, "rank1": -10.0,
         "super_anchor": 0.0}
    check(t, [(-100, 0), (-75, 20 * (-75 + 100) / (-50 + 100)), (-50, 20),
              (-30, 20 + 60 * (-30 + 50) / (-10 + 50)), (-10, 80),
              (-5, 80 + 20 * (-5 + 10) / (0 + 10)), (0, 100), (3, 100)])


def test_piecewise_min_segments():
    b, r30, r1, s = 100.0, 50.0, 20.0, 10.0
    t = {"kind": "piecewise_min", "baseline": b, "rank30": r30, "rank1": r1, "super_anchor": s}
    check(t, [
        (0, 0), (-1, 0), (b, 0), (150, 0),
        (r30, 20), (r1, 80), (s, 100), (5, 100), (1e-9, 100),
        (75, 20 * (b - 75) / (b - r30)),
        (35, 20 + 60 * (r30 - 35) / (r30 - r1)),
        (15, 80 + 20 * (r1 - 15) / (r1 - s)),
    ])


def test_piecewise_log_min_segments():
    b, r30, r1, s = 1e4, 1e3, 1e2, 10.0
    t = {"kind": "piecewise_log_min", "baseline": b, "rank30": r30, "rank1": r1,
         "super_anchor": s}
    check(t, [
        (0, 0), (-5, 0), (b, 0), (2e4, 0),
        (r30, 20), (r1, 80), (s, 100), (1, 100), (1e-6, 100),
        (5000, 20 * math.log(b / 5000) / math.log(b / r30)),
        (300, 20 + 60 * math.log(r30 / 300) / math.log(r30 / r1)),
        (30, 80 + 20 * math.log(r1 / 30) / math.log(r1 / s)),
    ])
    # any anchor ≤ 0: score 0 (the logs are undefined)
    for name in ("baseline", "rank30", "rank1", "super_anchor"):
        bad = dict(t, **{name: 0.0 if name != "baseline" else -1.0})
        validate(bad)
        check(bad, [(50, 0), (5, 0)])


# --------------------------------------------------------------------------- no score
VALID_TABLES = {
    "linear": {"lower": 0.0, "upper": 1.0},
    "min_linear": {"baseline": 1.0, "expert": 0.0},
    "min_linear_positive": {"baseline": 1.0, "expert": 0.5},
    "min_inverse_anchor": {"anchor_raw": 2.0, "anchor_score": 50.0},
    "compression_ratio_cropped_guarded": {"baseline": 1.0, "expert": 0.2},
    "log_anchor": {"anchor_raw": 10.0, "anchor_score": 50.0},
    "log_max": {"baseline": 1.0, "expert": 10.0},
    "log1p_max": {"baseline": 1.0, "upper": 10.0},
    "log_min": {"baseline": 10.0, "expert": 1.0},
    "piecewise_max": {"baseline": 0.0, "rank30": 1.0, "rank1": 2.0, "super_anchor": 3.0},
    "piecewise_min": {"baseline": 3.0, "rank30": 2.0, "rank1": 1.0, "super_anchor": 0.5},
    "piecewise_log_min": {"baseline": 1e3, "rank30": 1e2, "rank1": 10.0, "super_anchor": 1.0},
}


def test_valid_tables_cover_every_kind():
    assert set(VALID_TABLES) == set(KINDS)


@pytest.mark.parametrize("raw", [None, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("kind", sorted(VALID_TABLES))
def test_no_raw_or_non_finite_is_null_never_zero(kind, raw):
    table = {"kind": kind, **VALID_TABLES[kind]}
    validate(table)
    assert rescale(table, raw) is None
    assert rescale(table, 0.5) is not None  # the same table does score a finite raw


def test_no_table_is_null():
    assert rescale(None, 12.0) is None
    assert rescale(None, None) is None


def test_integer_raw_and_params():
    assert rescale({"kind": "linear", "lower": 0, "upper": 4}, 1) == 25.0


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("table, param, words", [
    ({"kind": "sigmoid", "lower": 0, "upper": 1}, "kind", "unknown kind 'sigmoid'"),
    ({"lower": 0, "upper": 1}, "kind", "unknown kind None"),
    ({"kind": "linear", "lower": 0}, "upper", "needs parameter 'upper'"),
    ({"kind": "piecewise_max", "baseline": 0, "rank30": 1, "super_anchor": 3}, "rank1",
     "needs parameter 'rank1'"),
    ({"kind": "linear", "lower": "0", "upper": 1}, "lower", "must be a number"),
    ({"kind": "linear", "lower": True, "upper": 1}, "lower", "must be a number"),
    ({"kind": "linear", "lower": None, "upper": 1}, "lower", "must be a number"),
    ({"kind": "linear", "lower": 0, "upper": math.inf}, "upper", "must be finite"),
    ({"kind": "linear", "lower": 0, "upper": math.nan}, "upper", "must be finite"),
    ({"kind": "linear", "lower": 0, "upper": 1, "expert": 2}, "expert", "takes no parameter"),
])
def test_validate_rejects_bad_tables(table, param, words):
    with pytest.raises(RescaleError) as info:
        validate(table)
    assert info.value.param == param
    assert words in str(info.value)


@pytest.mark.parametrize("table", [
    {"kind": "linear", "lower": 3, "upper": 3},
    {"kind": "min_linear", "baseline": 7, "expert": 7},
    {"kind": "piecewise_max", "baseline": 0, "rank30": 0, "rank1": 2, "super_anchor": 3},
    {"kind": "piecewise_max", "baseline": 0, "rank30": 1, "rank1": 1, "super_anchor": 3},
    {"kind": "piecewise_min", "baseline": 9, "rank30": 5, "rank1": 2, "super_anchor": 2},
    {"kind": "piecewise_log_min", "baseline": 9, "rank30": 9, "rank1": 2, "super_anchor": 1},
    # ln(1 + U/B) = 0 although B, U > 0: U/B underflows to 0
    {"kind": "log1p_max", "baseline": 1e308, "upper": 5e-324},
])
def test_validate_rejects_degenerate_sets(table):
    with pytest.raises(RescaleError, match="degenerate"):
        validate(table)


def test_bad_table_raises_at_grading_never_zero():
    with pytest.raises(RescaleError):
        rescale({"kind": "linear", "lower": 1, "upper": 1}, 5.0)
    with pytest.raises(RescaleError):
        rescale({"kind": "nope"}, 5.0)


# --------------------------------------------------------------------------- at load time
def _task(root: Path, tid: str, rescale_line: str) -> None:
    d = root / "tasks" / tid
    for sub in ("environment", "judge"):
        (d / sub).mkdir(parents=True)
        (d / sub / "Dockerfile").write_text("FROM scratch\n")
    (d / "task.toml").write_text(f'id = "{tid}"\n\n[judge]\ncmd = "true"\n\n[score]\n'
                                 f"{rescale_line}\n")


def test_loader_rejects_bad_tables_naming_task_kind_and_param(tmp_path):
    (tmp_path / "benchmark.toml").write_text('name = "b"\n')
    _task(tmp_path, "good", 'rescale = { kind = "linear", lower = 0.0, upper = 1.0 }')
    _task(tmp_path, "unknown", 'rescale = { kind = "cubic", lower = 0.0 }')
    _task(tmp_path, "missing", 'rescale = { kind = "piecewise_min", baseline = 9.0, '
                               'rank30 = 5.0, super_anchor = 1.0 }')
    _task(tmp_path, "degenerate", 'rescale = { kind = "linear", lower = 2.0, upper = 2.0 }')
    _task(tmp_path, "notanumber", 'rescale = { kind = "log_max", baseline = "1", expert = 2.0 }')
    bench = load_benchmark(tmp_path)
    assert list(bench.tasks) == ["good"]
    errors = {e.task: str(e) for e in bench.errors}
    assert set(errors) == {"unknown", "missing", "degenerate", "notanumber"}
    assert "score.rescale.kind" in errors["unknown"] and "'cubic'" in errors["unknown"]
    assert "score.rescale.rank1" in errors["missing"]
    assert "'piecewise_min'" in errors["missing"]
    assert "degenerate" in errors["degenerate"] and "'linear'" in errors["degenerate"]
    assert "score.rescale.baseline" in errors["notanumber"]
    for task, text in errors.items():
        assert f"tasks/{task}/task.toml" in text


# --------------------------------------------------------------------------- documentation


def test_every_kind_documented_in_the_repository():
    """docs/rescale.md (linked from the README) lists each kind with its parameters in order,
    and help() of the function shows the same kinds: the repository documents itself."""
    import pydoc

    from sforge import rescale as fn

    doc = (REPO / "docs" / "rescale.md").read_text()
    assert "docs/rescale.md" in (REPO / "README.md").read_text()
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    assert "rescale(table" in text
    for name, kind in KINDS.items():
        params = ", ".join(f"`{p}`" for p in kind.params)
        assert f"| `{name}` | {params} |" in doc, name
        assert f"{name}({', '.join(kind.params)}): {kind.doc}" in text, name


def test_docs_do_not_point_outside_the_repository():
    """README, docs and docstrings say what they need in their own words: no pointer to a spec
    or architecture page that is not in the repository."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "sforge").rglob("*.py")), *sorted((REPO / "rules").glob("*.smk")),
             REPO / "Snakefile"]
    bad = [f"{f.relative_to(REPO)}: {line.strip()}" for f in files
           for line in f.read_text().splitlines()
           if any(word in line for word in ("shared/", "spec/rescale", "ARCHITECTURE.md",
                                            "sforge's spec", "of the spec"))]
    assert bad == []
