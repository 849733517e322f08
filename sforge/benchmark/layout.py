"""Where every product lives under <results>/<benchmark name>/: one place, so that the CLI,
the Snakefile and the cluster jobs agree on every path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IMAGE_KINDS = ("base", "work", "judge")
REPORT_PAGES = "report"  # <root>/report/<task>.html, linked from <root>/report.html


@dataclass(frozen=True)
class Layout:
    """Every product's path under one benchmark's results directory."""
    root: Path  # <results>/<benchmark name>

    @classmethod
    def for_benchmark(cls, results: Path | str, bench_name: str) -> Layout:
        """The layout of `bench_name` under the results directory `results`."""
        return cls(Path(results) / bench_name)

    # images -----------------------------------------------------------------
    def sentinel(self, kind: str, name: str, digest: str) -> Path:
        """Hash-stamped: a new content hash is a new target, an old one is no longer asked for."""
        return self.root / "images" / kind / name / f"{digest}.json"

    def sentinel_parts(self, path: Path | str) -> tuple[str, str, str]:
        """(kind, name, digest) of a sentinel path, the inverse of `sentinel`."""
        path = Path(path)
        if path.parent.parent.parent.name != "images" or path.suffix != ".json":
            raise ValueError(f"{path} is not an image sentinel under {self.root / 'images'}")
        return path.parent.parent.name, path.parent.name, path.stem

    def build_log(self, kind: str, name: str, digest: str) -> Path:
        """Also the `log:` pattern of the image rules, called with "{wildcard}" names."""
        return self.root / "logs" / "build" / kind / f"{name}-{digest}.log"

    def step_log(self, step: str) -> Path:
        """The log of one aggregation step (scores, best, leaderboard, report) or other job."""
        return self.root / "logs" / "steps" / f"{step}.log"

    def blob_log(self, blob: str) -> Path:
        """The log of fetching one blob."""
        return self.root / "logs" / "blobs" / f"{blob}.log"

    # grading ----------------------------------------------------------------
    def eval_result(self, task: str, key: str) -> Path:
        """The result file of one eval key."""
        return self.root / "evals" / task / f"{key}.json"

    def eval_parts(self, path: Path | str) -> tuple[str, str]:
        """(task, key) of an eval result path, the inverse of `eval_result`."""
        path = Path(path)
        if path.parent.parent.name != "evals" or path.suffix != ".json":
            raise ValueError(f"{path} is not an eval result under {self.root / 'evals'}")
        return path.parent.name, path.stem

    def eval_log(self, task: str, key: str) -> Path:
        """The judge's log beside its result file."""
        return self.root / "evals" / task / f"{key}.log"

    def eval_claim(self, task: str, key: str) -> Path:
        """Held while a process grades the key (sforge.grading.claims): the key is graded once."""
        return self.root / "evals" / task / f"{key}.claim"

    @property
    def store(self) -> Path:
        """Archives given to `sforge eval`, by source and task, named by their sha256."""
        return self.root / "submissions"

    @property
    def experiments(self) -> Path:
        """Archives graded with overridden settings (`sforge eval --timeout`): kept for
        their results, never among the submissions the leaderboard grades."""
        return self.root / "experiments"

    # sforge doctor ----------------------------------------------------------
    def doctor_report(self, run: str, node: str) -> Path:
        """What one node found about itself, written by a job on that node."""
        return self.root / ".sforge" / "doctor" / run / f"{node}.json"

    # tables -----------------------------------------------------------------
    @property
    def scores(self) -> Path:
        """scores.csv: one row per graded submission."""
        return self.root / "scores.csv"

    @property
    def best(self) -> Path:
        """best.csv: the best valid result per source and task."""
        return self.root / "best.csv"

    @property
    def leaderboard(self) -> Path:
        """leaderboard.csv: per source, the mean rescaled best."""
        return self.root / "leaderboard.csv"

    @property
    def leaderboard_repeats(self) -> Path:
        """leaderboard_repeats.csv: per (agent, model), the mean over its repeats with a 95 %
        interval, best-of-n and pass@k (sforge.scores.repeats); the report writes it."""
        return self.root / "leaderboard_repeats.csv"

    @property
    def leaderboard_md(self) -> Path:
        """The leaderboard as Markdown."""
        return self.root / "leaderboard.md"

    @property
    def budgets(self) -> Path:
        """budgets.csv: the leaderboard at time budgets."""
        return self.root / "budgets.csv"

    @property
    def report(self) -> Path:
        """The report's index page."""
        return self.root / "report.html"

    @property
    def report_pages(self) -> Path:
        """One page per task, linked from report.html."""
        return self.root / REPORT_PAGES

    @property
    def cache(self) -> Path:
        """Memories that only ever save time (hashes, parsed results, table parts)."""
        return self.root / ".cache"
