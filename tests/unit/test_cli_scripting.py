"""What a script relies on (no Docker): distinct exit codes mapped in one place and documented,
--json as one object on stdout (errors too), one-line errors for a broken --config, -j 0 and
a missing --script, examples in every --help, shell completion, and NO_COLOR."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sforge.cli import exits
from sforge.cli.main import build_parser
from sforge.core.console import JobProgress, Verdict
from sforge.core.errors import (
    BuildFailed,
    DefinitionError,
    InfrastructureError,
    SforgeError,
    UsageError,
)
from tests.helpers import paths
from tests.helpers.cli import sforge

FIXTURE = paths.FIXTURES / "scores_bench"
# The commands that print data, each with --json.
JSON_COMMANDS = ("list", "plan", "verify", "build", "push", "pull", "eval", "grade", "report",
                 "runs", "agents", "doctor", "check", "clean", "run", "import", "prove")


@pytest.fixture
def bench(tmp_path) -> Path:
    root = tmp_path / "bench"
    shutil.copytree(FIXTURE, root)
    return root


def subparsers() -> dict:
    """Every command's parser, run commands included."""
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


# exit codes -----------------------------------------------------------------------------
def test_each_error_class_has_its_own_exit_code():
    assert exits.exit_code(UsageError("x")) == 2
    assert exits.exit_code(SforgeError("x")) == 3
    assert exits.exit_code(DefinitionError("task.toml", "judge", "x")) == 3
    assert exits.exit_code(BuildFailed("x")) == 3
    assert exits.exit_code(InfrastructureError("x")) == 4
    assert [c for c, _, _ in exits.EXIT_CODES] == [0, 1, 2, 3, 4, 130, 141]
    from sforge.runs.runner import RunFailed
    from sforge.runs.signals import Interrupted
    from sforge.service.client import ServiceError

    assert exits.exit_code(RunFailed("x")) == 1 and exits.exit_code(Interrupted("x")) == 130
    assert exits.exit_code(ServiceError(0, "cannot reach")) == 4
    assert exits.exit_code(ServiceError(503, "busy")) == 4
    assert exits.exit_code(ServiceError(409, "a game task refuses archives")) == 3


def test_the_exit_codes_are_documented_in_help_and_readme():
    text = sforge("--help").stdout
    readme = (paths.REPO / "README.md").read_text()
    section = readme[readme.index("### Exit codes"):]
    for code, kind, _ in exits.EXIT_CODES:
        assert re.search(rf"^  {code}\s+{kind}\s", text, re.M), (code, text)
        assert re.search(rf"^\| {code} \| {kind} \|", section, re.M), (code, kind)


def test_usage_input_codes_and_json_errors(bench, tmp_path):
    proc = sforge("grade", "-j", "0", "-b", str(bench))
    assert proc.returncode == 2 and "-j/--jobs: 0: expected 1 or more" in proc.stderr
    proc = sforge("grade", "-j", "0", "--json", "-b", str(bench))
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {"error": "grade: argument -j/--jobs: 0: expected 1 or "
                                                "more", "kind": "usage", "code": 2}
    proc = sforge("list", "--no-such-flag")
    assert proc.returncode == 2 and "unrecognized arguments: --no-such-flag" in proc.stderr
    proc = sforge("list", "--json", "-b", str(tmp_path / "missing"))
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["kind"] == "input"
    proc = sforge("eval", "-t", "max_task", "-a", str(tmp_path / "nope.tar"), "--json",
                  "-b", str(bench), "--results", str(tmp_path / "res"))
    assert proc.returncode == 3
    assert json.loads(proc.stdout) == {"error": f"{tmp_path / 'nope.tar'}: archive not found",
                                       "kind": "input", "code": 3}
    proc = sforge("eval", "-t", "max_task", "-a", "x", "--timeout", "0", "-b", str(bench))
    assert proc.returncode == 2 and "--timeout: 0: expected a finite number above 0" \
        in proc.stderr


@pytest.mark.parametrize("source", ["../../x", "", "a/b", ".hidden", "-x", "x" * 256])
def test_eval_refuses_a_source_that_is_no_folder_name(bench, tmp_path, source):
    """--source names a folder under the submissions store: a path, an empty or a dotted name
    would store the archive outside it, or where grade and report never look."""
    res = tmp_path / "res"
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"")
    proc = sforge("eval", "-t", "max_task", "-a", str(archive), f"--source={source}", "--json",
                  "-b", str(bench), "--results", str(res))
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "usage"
    assert "--source" in proc.stderr and "letters, digits" in proc.stderr
    assert not res.exists() or not [p for p in res.rglob("*") if p.is_file()
                                     and ".cache" not in p.parts]


def test_prove_and_report_fail_on_a_task_that_does_not_load(tmp_path):
    """A task.toml that does not load is a failure for prove as for every command that reads
    the benchmark: exit 1, the task named on stderr, counted in the JSON."""
    root = tmp_path / "bench"
    (root / "tasks" / "broken").mkdir(parents=True)
    (root / "benchmark.toml").write_text('name = "b"\n')
    (root / "tasks" / "broken" / "task.toml").write_text("id = [\n")
    res = str(tmp_path / "res")
    for command in ("prove", "report"):
        proc = sforge(command, "--json", "-b", str(root), "--results", res)
        assert proc.returncode == 1, (command, proc.stderr)
        assert "broken" in proc.stderr, (command, proc.stderr)
        out = json.loads(proc.stdout)
        assert out["broken_tasks"] == 1, (command, out)
        assert out.get("ok", False) is False, (command, out)


def test_the_leaderboards_json_keeps_its_types(tmp_path):
    """report --json gives numbers as numbers (a script compares them), an empty field as null,
    and a source that looks like a number stays its text."""
    from sforge.scores.tables import leaderboard_records

    board = tmp_path / "leaderboard.csv"
    board.write_text("rank,source,agent,model,score,cat_a,tasks_valid,tasks\n"
                     "1,007,,m,75.5,80.0,2,3\n2,b,a,,0.0,,0,3\n")
    rows = leaderboard_records(board)
    assert json.loads(json.dumps(rows)) == rows  # plain JSON types
    assert rows == [
        {"rank": 1, "source": "007", "agent": None, "model": "m", "score": 75.5, "cat_a": 80.0,
         "tasks_valid": 2, "tasks": 3},
        {"rank": 2, "source": "b", "agent": "a", "model": None, "score": 0.0, "cat_a": None,
         "tasks_valid": 0, "tasks": 3}]


def test_a_yaml_syntax_error_in_config_is_one_line(bench, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("jobs: 1\narchive_limits: {max_members: 3\nresults: x\n")
    proc = sforge("plan", "--config", str(config), "-b", str(bench))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr  # one line, no traceback
    assert re.fullmatch(rf"sforge: error: {re.escape(str(config))}:3:8: YAML syntax error: .+",
                        proc.stderr.strip()), proc.stderr


def test_a_missing_script_is_one_usage_line(tmp_path):
    edge = str(paths.REPO / "edgebench")
    res = str(tmp_path / "res")
    proc = sforge("run", "-a", "script", "-t", "knapsack", "-b", edge, "--results", res)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "sforge: error: run: agent script runs a script: give " \
                                  "--script FILE"
    proc = sforge("run", "-a", "script", "--script", str(tmp_path / "no.sh"), "-t", "knapsack",
                  "-b", edge, "--results", res)
    assert proc.returncode == 3
    assert proc.stderr.strip() == f"sforge: error: --script {tmp_path / 'no.sh'}: no such file"
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("spec.json"))


@pytest.mark.parametrize("args", [("--memory", "lots"), ("--memory", "0"), ("--cpus", "0"),
                                  ("--cpus", "nan"), ("--budget", "-1"), ("--cooldown", "-2"),
                                  ("--timeout", "0")])
def test_run_refuses_bad_limits_before_anything_starts(tmp_path, args):
    """A bad resource value is a usage error (exit 2) found by the parser: the run id is not
    spent (no spec.json), so the corrected command can use it."""
    edge = str(paths.REPO / "edgebench")
    res = tmp_path / "res"
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\n")
    proc = sforge("run", "-a", "script", "--script", str(script), "-t", "knapsack", "--run-id",
                  "m1", *args, "--json", "-b", edge, "--results", str(res))
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "usage"
    assert args[0] in proc.stderr and "Traceback" not in proc.stderr
    assert not list(res.rglob("spec.json")) if res.exists() else True


def test_runs_of_an_unknown_run_is_an_input_error(tmp_path):
    """`sforge runs --run X` for a run that does not exist exits 3, as --cancel X does: a typo
    is not an empty table."""
    edge = str(paths.REPO / "edgebench")
    for args in (("--run", "nosuch"), ("--cancel", "nosuch")):
        proc = sforge("runs", *args, "--json", "-b", edge, "--results", str(tmp_path / "r"))
        assert proc.returncode == 3, (args, proc.stdout, proc.stderr)
        assert json.loads(proc.stdout)["error"].startswith("no run nosuch under ")


def test_plan_with_the_daemon_down_says_presence_is_unknown(tmp_path):
    """plan works from the sentinels when the daemon is unreachable, and says that it did."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'no.sock'}"}
    edge = str(paths.REPO / "edgebench")
    proc = subprocess.run([sys.executable, "-m", "sforge", "plan", "--json", "-b", edge,
                           "--results", str(tmp_path / "r")], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["presence_known"] is False and out["build"] == out["images"] == 11, out
    text = subprocess.run([sys.executable, "-m", "sforge", "plan", "-b", edge, "--results",
                           str(tmp_path / "r")], capture_output=True, text=True, env=env)
    assert text.stdout.strip().splitlines()[-1].endswith(
        "Docker daemon unreachable, so image presence is unknown"), text.stdout


# --json ---------------------------------------------------------------------------------
def test_every_data_command_has_json_and_every_command_examples():
    parsers = subparsers()
    for name in JSON_COMMANDS:
        assert "--json" in parsers[name]._option_string_actions, name
    for name, parser in parsers.items():
        assert (parser.epilog or "").startswith("examples:\n  "), name
        assert "examples:" in parser.format_help(), name


def test_json_is_one_object_on_stdout(bench, tmp_path):
    res = str(tmp_path / "res")
    for args in (["list"], ["plan"], ["check"], ["runs"], ["agents"]):
        proc = sforge(*args, "--json", "-b", str(bench), "--results", res)
        data = json.loads(proc.stdout)  # the whole of stdout is one document
        assert isinstance(data, dict), (args, data)
        assert proc.returncode in (0, 1), (args, proc.stderr)
    plan = json.loads(sforge("plan", "--json", "-b", str(bench), "--results", res).stdout)
    assert plan["build"] == len([d for d in plan["decisions"] if d["action"] == "build"]) > 0
    assert set(plan["grading"]) == {"results", "pending", "regrade"}
    check = json.loads(sforge("check", "--json", "-b", str(bench), "--results", res).stdout)
    assert check["errors"] == sum(f["severity"] == "error" for f in check["findings"])
    assert json.loads(sforge("runs", "--json", "-b", str(bench), "--results", res).stdout) \
        == {"runs": []}
    agents = json.loads(sforge("agents", "--json").stdout)["agents"]
    assert {"claude-code", "codex", "script"} <= {a["agent"] for a in agents}


# completion -----------------------------------------------------------------------------
def test_bash_completion_is_sourced_and_completes_commands():
    script = sforge("completion", "bash")
    assert script.returncode == 0, script.stderr
    probe = ('source /dev/stdin; complete -p sforge; '
             'COMP_WORDS=(sforge gr); COMP_CWORD=1; _shtab_sforge sforge gr sforge; '
             'echo "words: ${COMPREPLY[*]}"; '
             'COMP_WORDS=(sforge eval --arch); COMP_CWORD=2; _shtab_sforge sforge --arch eval; '
             'echo "options: ${COMPREPLY[*]}"; compgen -W "$(echo grade report)" gr')
    proc = subprocess.run(["bash", "-c", probe], input=script.stdout, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "complete -o bashdefault -F _shtab_sforge sforge"
    assert "words: grade" in lines and "options: --archive" in lines
    assert sforge("completion", "fish").returncode == 2


# An interactive zsh on a pseudo-terminal (zsh/zpty): `sforge ev<Tab>` is typed, then the
# line, prefixed with `print`, is run: it prints what completion made of it.
ZSH_PROBE = """zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PS1="> "; fpath=({fpath} $fpath); autoload -U compinit; compinit -u -D; \
path=({bin} $path); echo READY ${{_comps[sforge]}}'
zpty -r -m z out '*READY _*'
print -rn -- "$out"
zpty -n -w z $'sforge ev\\t'
zpty -n -w z $'\\C-aprint -r -- LINE: \\C-e; print END$((6*7))\\n'
zpty -r -m z out '*END42*'
print -rn -- "$out"
zpty -d z
"""  # each read waits for output the typed line's echo cannot hold (READY _, END42): no
# sleeps; the test's timeout bounds a wait


def test_zsh_completion_completes_a_command(tmp_path):
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.fail("zsh missing: apt-get install zsh (scripts/setup.sh does)")
    script = sforge("completion", "zsh")
    assert script.returncode == 0 and script.stdout.startswith("#compdef sforge")
    (tmp_path / "_sforge").write_text(script.stdout)
    probe = ZSH_PROBE.format(fpath=tmp_path, bin=Path(sys.executable).parent)
    try:
        proc = subprocess.run([zsh, "-f", "-c", probe], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"zsh never printed the completed line: {exc.stdout!r}")
    out = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", proc.stdout)
    assert "READY _sforge" in out, out  # compinit found the script on fpath
    assert "LINE: sforge eval\n" in out.replace("\r", ""), out  # `ev` became `eval`


def test_help_and_eval_do_not_load_shtab_or_rich():
    code = ("import sys\nfrom sforge.cli.main import build_parser\n"
            "build_parser(['--help']).format_help()\n"
            "build_parser(['eval']).parse_args(['eval', '-t', 'x', '-a', 'y'])\n"
            "print(sorted(m for m in ('shtab', 'rich', 'yaml', 'tabulate') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=paths.REPO, env={**os.environ, "PYTHONPATH": str(paths.REPO)})
    assert proc.stdout.strip() == "[]", proc.stderr


# NO_COLOR -------------------------------------------------------------------------------
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def draw(monkeypatch, no_color: str | None) -> str:
    """What the progress display writes to a terminal for two jobs and a failure."""
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    out = FakeTerminal()
    verdict = Verdict("alpha  src  score 7", False)
    with JobProgress("grade", lambda rule, wc: verdict, verbose=True, stream=out) as progress:
        progress.progress(0, 2)
        progress.finished("evaluate", {"task": "alpha"})
        progress.failed("evaluate", {"task": "beta"})
        progress.progress(2, 2)
    return out.getvalue()


def test_no_color_means_no_escape_sequences(monkeypatch):
    assert "\x1b[" in draw(monkeypatch, None)  # a terminal gets the live line
    plain = draw(monkeypatch, "1")
    assert "\x1b" not in plain
    assert plain.splitlines() == ["alpha  src  score 7", "alpha  src  score 7"]


def test_run_progress_lines(tmp_path):
    from sforge.cli.runs import run_verdict

    folder = tmp_path / "runs" / "r1" / "knapsack" / "0"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"state": "done", "best_score": 7}))
    wc = {"run": "r1", "task": "knapsack", "repeat": "0"}
    assert run_verdict(tmp_path, "agent_run", wc) == Verdict("knapsack  r1/0  done  best 7",
                                                             False)
    (folder / "run.json").write_text(json.dumps({"state": "failed", "error": "HTTP 401"}))
    line = run_verdict(tmp_path, "agent_run", wc)
    assert line is not None and line.invalid and "failed  best -  HTTP 401" in line.line
    failed = run_verdict(tmp_path, "agent_run", {**wc, "failed": "yes", "reason": "no disk"})
    assert failed is not None and failed.line.startswith("knapsack  r1/0  FAILED: no disk")
    assert run_verdict(tmp_path, "other", {}) is None


def test_a_failed_jobs_snakemake_report_is_hidden_and_its_reason_kept():
    """With a progress that explains failed jobs, Snakemake's exception block and closing
    notes are hidden; the reason (the exception's message, without frames) reaches the
    progress's one line."""
    import logging

    from sforge.core.console import HideChatter

    text = ('RuleException:\nInterrupted in file "/x/rules/runs.smk", line 34:\n'
            'run c1 task knapsack repeat 0 failed: no disk\n'
            '  File "/x/rules/runs.smk", line 34, in __rule_agent_run\n')

    def record(msg: str, level: int = logging.ERROR, **extra) -> logging.LogRecord:
        rec = logging.LogRecord("snakemake", level, "", 0, msg, None, None)
        rec.__dict__.update(extra)
        return rec

    block = record(text, event="error", exception="RuleException")
    notes = [record("Exiting because a job execution failed. Look above for error messages"),
             record("--keep-incomplete mode is set, so ...", logging.WARNING)]
    other = record("MissingInputException: no rule to make x", event="error",
                   exception="MissingInputException")
    hide = HideChatter(job_errors=True)
    assert not hide.filter(block) and not any(hide.filter(n) for n in notes)
    assert hide.filter(other)  # not a job's failure: still shown
    assert HideChatter().filter(block)  # `sforge grade` keeps Snakemake's report
    lines: list[str] = []
    progress = JobProgress("run", lambda rule, wc: Verdict(f"FAILED: {wc['reason']}", True),
                           explains_failures=True)
    progress.print = lines.append  # type: ignore[method-assign]
    progress.emit(block)
    progress.emit(record("Error in rule agent_run", event="job_error", rule_name="agent_run",
                         jobid=3))
    assert lines == ["FAILED: run c1 task knapsack repeat 0 failed: no disk"]


def test_json_is_one_line(bench, tmp_path):
    for args in (["list"], ["plan"], ["check"], ["eval", "-t", "x", "-a", "y"]):
        proc = sforge(*args, "--json", "-b", str(bench), "--results", str(tmp_path / "r"))
        assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("{"), (args, proc.stdout)


def test_completion_needs_no_docker_and_nothing_but_shtab():
    """`sforge completion` prints a script: it sweeps no judges (no Docker call) and loads no
    third-party module but shtab (it works in a venv with only sforge's own files)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sforge", "completion",
                           "bash"], capture_output=True, text=True, cwd=paths.REPO,
                          env={**os.environ, "PYTHONPATH": str(paths.REPO),
                               "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode == 0 and "_shtab_sforge" in proc.stdout
    loaded = {line.split("|")[-1].strip().split(".")[0]
              for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "shtab" in loaded
    assert not loaded & {"yaml", "docker", "snakemake", "rich", "httpx", "tabulate"}, loaded
