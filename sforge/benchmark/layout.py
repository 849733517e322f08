"""Where every product lives under <results>/<benchmark name>/: one place, so that the CLI,
the Snakefile and the cluster jobs agree on every path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IMAGE_KINDS = ("base", "work", "judge")
AGENT_LOG = "agent.log"  # a run folder's log of its latest attempt
_ATTEMPT_FILES = {"record": ("attempt-", ".json"), "log": ("agent-attempt-", ".log")}
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

    def sentinels(self, kind: str) -> Path:
        """The folder of one kind's sentinels, <kind>/<name>/<digest>.json."""
        return self.root / "images" / kind

    def build_logs(self, kind: str) -> Path:
        """The folder of one kind's build logs."""
        return self.root / "logs" / "build" / kind

    # grading ----------------------------------------------------------------
    @property
    def evals(self) -> Path:
        """Every result, by task: evals/<task>/<key>.json beside its .log."""
        return self.root / "evals"

    def eval_dir(self, task: str) -> Path:
        """One task's results and judge logs."""
        return self.evals / task

    def eval_result(self, task: str, key: str) -> Path:
        """The result file of one eval key."""
        return self.eval_dir(task) / f"{key}.json"

    def eval_parts(self, path: Path | str) -> tuple[str, str]:
        """(task, key) of an eval result path, the inverse of `eval_result`."""
        path = Path(path)
        if path.parent.parent.name != "evals" or path.suffix != ".json":
            raise ValueError(f"{path} is not an eval result under {self.root / 'evals'}")
        return path.parent.name, path.stem

    def eval_log(self, task: str, key: str) -> Path:
        """The judge's log beside its result file."""
        return self.eval_dir(task) / f"{key}.log"

    def eval_claim(self, task: str, key: str) -> Path:
        """Held while a process grades the key (sforge.grading.claims): the key is graded once."""
        return self.eval_dir(task) / f"{key}.claim"

    @property
    def store(self) -> Path:
        """Archives given to `sforge eval`, by source and task, named by their sha256."""
        return self.root / "submissions"

    @property
    def experiments(self) -> Path:
        """Archives graded outside the leaderboard (`sforge eval --timeout`, the archives
        `sforge check --integrity` grades): kept for their results, never among the
        submissions the leaderboard grades."""
        return self.root / "experiments"

    # sforge check ----------------------------------------------------------
    def reference_archive(self, task: str, name: str) -> Path:
        """A task's [reference] packed by `sforge check --integrity`."""
        return self.root / "check" / "reference" / task / name

    def repeat_log(self, task: str, name: str) -> Path:
        """The log of one judge run of `sforge check --repeat`."""
        return self.root / "check" / "repeat" / task / name

    # sforge doctor ----------------------------------------------------------
    def doctor_dir(self, run: str) -> Path:
        """What the nodes of one `sforge doctor` run found about themselves."""
        return self.root / ".sforge" / "doctor" / run

    def doctor_report(self, run: str, node: str) -> Path:
        """What one node found about itself, written by a job on that node."""
        return self.doctor_dir(run) / f"{node}.json"

    def doctor_log(self, run: str, node: str) -> Path:
        """The log of one node's doctor job."""
        return self.doctor_dir(run) / f"{node}.log"

    # agent runs and the service ---------------------------------------------
    @property
    def runs(self) -> Path:
        """Agent runs: runs/<run>/spec.json and runs/<run>/<task>/<repeat>/."""
        return self.root / "runs"

    def run_spec(self, run: str) -> Path:
        """The settings one run was made with."""
        return self.runs / run / "spec.json"

    def run_dir(self, run: str, task: str, repeat: int | str) -> Path:
        """One run of one task, one repeat: its records, logs and workspace archives."""
        return self.runs / run / task / str(repeat)

    def run_record(self, run: str, task: str, repeat: int | str) -> Path:
        """run.json: the target of a finished run."""
        return self.run_dir(run, task, repeat) / "run.json"

    def run_log(self, run: str, task: str, repeat: int | str) -> Path:
        """The agent's log of one run."""
        return self.run_dir(run, task, repeat) / AGENT_LOG

    def agent_sentinel(self, agent: str, digest: str) -> Path:
        """A prepared agent bundle, by the digest of what it is made of."""
        return self.root / "agents" / agent / f"{digest}.json"

    @property
    def service(self) -> Path:
        """The judge service's state, tokens and logs."""
        return self.root / "service"

    @property
    def games(self) -> Path:
        """Game sessions' transcripts and logs."""
        return self.root / "games"

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


def attempt_file(folder: Path, attempt: int, kind: str = "record") -> Path:
    """A run folder's file of one attempt: its record (attempt-<n>.json) or, once a later
    attempt has begun, its agent log (agent-attempt-<n>.log)."""
    prefix, suffix = _ATTEMPT_FILES[kind]
    return folder / f"{prefix}{attempt}{suffix}"


def attempt_files(folder: Path, kind: str = "record") -> list[tuple[int, Path]]:
    """(attempt, path) of a run folder's attempt records or logs, oldest first."""
    prefix, suffix = _ATTEMPT_FILES[kind]
    found = []
    for path in folder.glob(f"{prefix}*{suffix}"):
        middle = path.name[len(prefix):len(path.name) - len(suffix)]
        if middle.isdigit():
            found.append((int(middle), path))
    return sorted(found)
