"""Integration: nothing blocks, nothing is lost. Bad submissions, bad sidecars, damaged and odd
results, sforge failing under --json, and several sforge processes on one results directory
(one killed -9), all through the real CLI, Snakemake and Docker daemon. Hostile archives are
built here, never committed."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import docker.errors
import pytest

from tests.helpers.archives import archive

pytestmark = pytest.mark.docker


def evals(sf) -> Path:
    return sf.results / sf.name / "evals"


def raw_tar(path: Path, entries: list[tuple[str, bytes]], gz: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buf.getvalue()) if gz else buf.getvalue())
    return path


def test_bad_submissions_become_their_own_invalid_results(minibench, tmp_path):
    """Non-gzip, empty, truncated, random bytes named .tar.gz, names the daemon cannot create,
    and a garbage sidecar: each is that submission's business; the rest grade and aggregate."""
    subs = minibench.bench / "submissions"
    archive(subs / "good" / "alpha" / "run1.tar.gz", {"answer.txt": "7"})
    archive(subs / "good" / "beta" / "run1.tar.gz", {"answer.txt": "4"})
    (subs / "good" / "beta" / "run1.json").write_text("{not json")  # garbage sidecar
    (subs / "junk" / "alpha").mkdir(parents=True)
    (subs / "junk" / "alpha" / "random.tar.gz").write_bytes(os.urandom(3000))
    (subs / "junk" / "alpha" / "empty.tar.gz").write_bytes(b"")
    whole = (subs / "good" / "alpha" / "run1.tar.gz").read_bytes()
    big = raw_tar(tmp_path / "big.tar.gz", [("answer.txt", os.urandom(200_000))]).read_bytes()
    (subs / "junk" / "alpha" / "truncated.tar.gz").write_bytes(big[: len(big) // 2])
    raw_tar(subs / "junk" / "gamma" / "longname.tar.gz", [("answer.txt", b"3"),
                                                          ("n" * 300, b"x")])
    raw_tar(subs / "junk" / "beta" / "deep.tar.gz",
            [("answer.txt", b"2"), ("/".join(["p" * 200] * 21), b"x")])
    assert whole  # the good archive is untouched by what follows
    report = minibench.run("report")
    assert report.returncode == 0, report.stderr[-3000:]
    assert f"{subs / 'good' / 'beta' / 'run1.json'}: not valid JSON" in report.stderr
    results = {json.loads(p.read_text())["submission"]: json.loads(p.read_text())
               for p in evals(minibench).glob("*/*.json")}
    assert len(results) == 7
    reasons = sorted(r["reason"] for r in results.values() if not r["valid"])
    assert len(reasons) == 3
    assert all("not a readable tar archive" in r or "corrupt" in r for r in reasons), reasons
    valid = sorted(r["score"] for r in results.values() if r["valid"])
    assert valid == [2.0, 3.0, 4.0, 7.0]  # the over-long names were rejected members
    scores = (minibench.results / minibench.name / "scores.csv").read_text()
    assert len(scores.strip().splitlines()) == 1 + 7
    # written once: nothing to grade again, and the reports still succeed
    again = minibench.run("grade", check=True)
    assert "7 up to date, 0 graded" in again.stdout
    # `sforge eval` of a non-gzip file: its invalid verdict, printed as one JSON object
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"this is not an archive" * 10)
    proc = minibench.run("eval", "--task", "alpha", "--archive", str(bad), "--json")
    assert proc.returncode == 1, proc.stderr  # an INVALID verdict
    out = json.loads(proc.stdout)
    assert out["valid"] is False and "not a readable tar archive" in out["reason"]
    # as text: the reason once, on the verdict's line (it is the summary too)
    text = minibench.run("eval", "--task", "alpha", "--archive", str(bad)).stdout
    assert text.count("not a readable tar archive") == 1 and "INVALID" in text, text
    assert "8 up to date, 0 graded" in minibench.run("grade", check=True).stdout


def test_damaged_result_is_set_aside_and_graded_again(minibench, tmp_path):
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "6"})
    first = json.loads(minibench.run("eval", "-t", "alpha", "-a", str(sub), "--json",
                                     check=True).stdout)
    [path] = evals(minibench).glob("alpha/*.json")
    path.write_text(path.read_text()[:40])  # truncated by hand
    proc = minibench.run("eval", "-t", "alpha", "-a", str(sub), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "unreadable eval result" in proc.stderr and "graded again" in proc.stderr
    assert json.loads(proc.stdout)["score"] == first["score"] == 6.0
    [aside] = (path.parent / "history").glob("*.unreadable.json")
    assert len(aside.read_text()) == 40
    assert json.loads(path.read_text())["valid"] is True
    # `grade` and `report` find a damaged result too (it used to be "up to date" for grade
    # and to stop report): set aside, graded again, aggregated
    path.write_text("{}")
    proc = minibench.run("grade", check=True)
    assert "1 graded" in proc.stdout and "unreadable" in proc.stderr
    path.write_bytes(b"\x00" * 10)
    proc = minibench.run("report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((path.parent / "history").glob("*.unreadable.json"))) == 3
    assert json.loads(path.read_text())["score"] == 6.0


def test_judge_text_is_sanitised_once_and_report_works(minibench, tmp_path):
    """A grader summary with a lone surrogate (a non-UTF-8 file name) used to be stored
    valid, then `report` died with UnicodeEncodeError naming no file."""
    run_sh = minibench.bench / "tasks" / "gamma" / "judge" / "run.sh"
    run_sh.write_text("#!/bin/sh\nprintf '%s' '{\"score\": 1, \"valid\": true, \"summary\": "
                      "\"caf\\udce9 \\u001b[2J\", \"details\": [\"\\ud800\"]}' "
                      "> /opt/sforge/result.json\n")
    archive(minibench.bench / "submissions" / "s" / "gamma" / "r.tar.gz", {"answer.txt": "1"})
    proc = minibench.run("report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = evals(minibench).glob("gamma/*.json")
    data = json.loads(path.read_bytes().decode("utf-8"))
    assert data["summary"] == "caf\ufffd \ufffd[2J" and data["details"] == ["\ufffd"]
    assert "caf\ufffd" in (minibench.results / minibench.name / "scores.csv").read_text()


def test_json_errors_are_one_object_with_a_kind(minibench, tmp_path):
    sub = archive(tmp_path / "s.tar.gz", {"answer.txt": "1"})
    down = minibench.run("eval", "-t", "alpha", "-a", str(sub), "--json",
                         env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert down.returncode == 4
    out = json.loads(down.stdout)
    assert out["kind"] == "infrastructure" and "Docker daemon" in out["error"]
    missing = minibench.run("eval", "-t", "alpha", "-a", str(tmp_path / "nope.tar"), "--json")
    assert missing.returncode == 3
    assert json.loads(missing.stdout) == {"error": f"{tmp_path / 'nope.tar'}: archive not found",
                                          "kind": "input", "code": 3}
    unknown = minibench.run("eval", "-t", "nosuch", "-a", str(sub), "--json")
    assert unknown.returncode == 3 and json.loads(unknown.stdout)["kind"] == "input"


def test_every_command_sweeps_orphaned_judges(minibench, docker_client):
    """A judge left by a killed sforge (dead owner) or past its deadline is removed by the
    next sforge command, even one with no grading to do."""
    from sforge.containers import owner

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {**owner.labels(deadline=time.time() + 3600), "sforge.test": minibench.name}
    api = docker_client.api
    ids = [api.create_container("busybox:1.36", ["sleep", "60"], labels={
               **labels, owner.OWNER_PID_LABEL: str(dead.pid)})["Id"],
           api.create_container("busybox:1.36", ["sleep", "60"], labels={
               **labels, owner.DEADLINE_LABEL: str(int(time.time()) - 5)})["Id"]]
    for cid in ids:
        api.start(cid)
    try:
        proc = minibench.run("list")
        assert proc.returncode == 0, proc.stderr
        left = api.containers(all=True, filters={"label": f"sforge.test={minibench.name}"})
        assert left == []
    finally:
        for cid in ids:  # removed by the sweep already: the point
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_container(cid, force=True)


# -- concurrent graders ------------------------------------------------------------------------
SLOW_JUDGE = """#!/bin/sh
sleep 1
n=$(cat answer.txt 2>/dev/null | tr -dc '0-9.' )
[ -n "$n" ] || n=0
printf '{"score": %s, "valid": true, "summary": "answer %s"}' "$n" "$n" > /opt/sforge/result.json
"""


class Starts:
    """Judge container starts on the daemon, from its event stream, for one benchmark."""

    def __init__(self, client, bench_name: str):
        self.events = client.events(decode=True, filters={"type": "container", "event": "start"},
                                    since=int(time.time()) - 1)
        self.prefix = f"{bench_name}.judge."
        self.by_owner: dict[str, int] = {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for event in self.events:
            attrs = event.get("Actor", {}).get("Attributes", {})
            if attrs.get("image", "").startswith(self.prefix):
                owner = attrs.get("sforge.owner.pid", "?")
                self.by_owner[owner] = self.by_owner.get(owner, 0) + 1

    def total(self) -> int:
        return sum(self.by_owner.values())

    def close(self) -> None:
        self.events.close()


def test_concurrent_graders_grade_each_key_once(minibench, docker_client):
    """Three `sforge grade -j 2` on one results directory, one killed -9 mid-run, then a
    rerun: every archive has exactly one valid result, nothing superseded or lost, and judge
    starts ≤ one per key + one per judge in flight in the killed process."""
    for task in ("alpha", "beta", "gamma"):
        (minibench.bench / "tasks" / task / "judge" / "run.sh").write_text(SLOW_JUDGE)
    n = 0
    for source in ("a", "b", "c"):
        for task in ("alpha", "beta", "gamma"):
            n += 1
            archive(minibench.bench / "submissions" / source / task / "r.tar.gz",
                    {"answer.txt": str(n)})
    minibench.run("build", check=True)
    starts = Starts(docker_client, minibench.name)
    cmd = [sys.executable, "-m", "sforge", "-b", str(minibench.bench), "--results",
           str(minibench.results), "grade", "-j", "2"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=minibench.bench.parent) for _ in range(3)]
    victim = procs[0]
    mine = {"label": f"sforge.owner.pid={victim.pid}"}
    deadline = time.monotonic() + 180
    while not docker_client.api.containers(filters={**mine, "status": "running"}):
        assert time.monotonic() < deadline, "the victim never started a judge"
        assert victim.poll() is None, victim.communicate()
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    in_flight = len(docker_client.api.containers(all=True, filters=mine))
    for p in procs[1:]:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, (out.decode(), err.decode()[-3000:])
    rerun = minibench.run("grade", check=True)
    assert "9 submission(s), 9 distinct" in rerun.stdout
    assert "0 failed" in rerun.stdout
    time.sleep(1)  # the last events reach the reader
    starts.close()
    files = list(evals(minibench).glob("*/*.json"))
    assert len(files) == 9
    scores = sorted(json.loads(p.read_text())["score"] for p in files)
    assert scores == [float(i) for i in range(1, 10)]
    assert not list(evals(minibench).glob("*/history/*"))  # nobody replaced anybody's result
    assert not list(evals(minibench).glob("*/*.claim"))
    assert docker_client.api.containers(all=True, filters=mine) == []  # swept by the rerun
    assert 9 <= starts.total() <= 9 + in_flight, (starts.by_owner, in_flight)


# -- a work or base build never reads a judge image --------------------------------------------
def test_build_refuses_judge_images_by_name_digest_or_other_tag(minibench, docker_client):
    """`COPY --from=<bench>.judge.<id>:<tag> /jud?e/… /leak/` used to pass build and check; by
    image id or by another tag of the judge image it needs the daemon to tell."""
    minibench.run("build", "--task", "gamma", check=True)
    [tag] = {t for img in docker_client.images.list(name=f"{minibench.name}.judge.gamma")
             for t in img.tags if t.startswith(f"{minibench.name}.judge.gamma:")}
    image = docker_client.images.get(tag)
    alias = f"{minibench.name}-innocent:1"
    image.tag(alias)
    dockerfile = minibench.bench / "tasks" / "alpha" / "environment" / "Dockerfile"
    original = dockerfile.read_text()
    base = minibench.bench / "bases" / "tiny" / "Dockerfile"
    try:
        # (identical judges of other tests' benchmarks may share the image: any judge tag)
        for ref, why in ((tag, "names a judge image"), (image.id, "is the judge image "),
                         (alias, "is the judge image ")):
            dockerfile.write_text(original + f"COPY --from={ref} /jud?e/run.sh /leak/\n")
            proc = minibench.run("build", "--task", "alpha")
            assert proc.returncode != 0
            text = proc.stdout + proc.stderr
            assert f"{dockerfile}:4: COPY --from {ref}: {why}" in text, text[-2000:]
            assert "must not read a judge image" in text
            check = minibench.run("check")
            if ref == tag:  # by name: `sforge check` sees it without the daemon
                assert f"{dockerfile}:4: judge-image:" in check.stdout
        dockerfile.write_text(original)
        base.write_text(base.read_text() + f"FROM {tag}\n")
        proc = minibench.run("build", "--task", "alpha")
        assert proc.returncode != 0
        assert f"{base}:3: FROM {tag}: names a judge image" in proc.stdout + proc.stderr
    finally:
        docker_client.images.remove(alias)
