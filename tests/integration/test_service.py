"""Integration: the judge service (`sforge serve`) on 127.0.0.1 and on a Unix socket, with
real judge containers; `sforge-submit` in bare containers with --network none."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import tarfile
import time
import uuid

import httpx
import pytest

from sforge.core.errors import SforgeError
from sforge.service.client import ServiceClient, ServiceError
from sforge.service.launch import start_service
from tests.helpers.benches import copy_bench, remove_images
from tests.helpers.paths import FIXTURES
from tests.helpers.servers import free_port

pytestmark = pytest.mark.docker


def tgz(files: dict[str, str]) -> bytes:
    """Deterministic bytes: the same files give the same archive (and sha256)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def own_containers(docker_client, pid: int) -> list:
    return docker_client.containers.list(
        all=True, filters={"label": ["sforge.judge", f"sforge.owner.pid={pid}"]})


@pytest.fixture(scope="module")
def service_setup(tmp_path_factory, docker_client):
    """A copy of fixtures/servicebench for the module: (its folder, the folder above it, its
    unique name, a config file with a small upload cap); its images removed after."""
    root = tmp_path_factory.mktemp("svc")
    name = copy_bench(FIXTURES / "servicebench", root / "bench")
    config = root / "config.yaml"
    config.write_text("service:\n  max_upload_bytes: 200000\n")
    yield root / "bench", root, name, config
    remove_images(docker_client, name)


@pytest.fixture(scope="module")
def svc(service_setup):
    """One service on a random loopback port for the tests that share it."""
    bench_dir, root, _, config = service_setup
    handle = start_service(bench_dir, root / "results", port=0, max_concurrent=2,
                           config=config)
    yield handle
    assert handle.stop() == 0, handle.log.read_text()[-3000:]


def run_client(svc, task="quick", **kw) -> tuple[str, ServiceClient]:
    admin = ServiceClient(svc.url, svc.admin_token)
    run_id, token = admin.register_run(task, f"r{uuid.uuid4().hex[:8]}", agent="script",
                                       model="none", **kw)
    return run_id, ServiceClient(svc.url, token)


def test_round_trip_and_same_archive_from_store(svc, service_setup):
    bench_dir, root, name, config = service_setup
    run_id, client = run_client(svc)
    archive = tgz({"answer.txt": "7\n", "notes.md": "not submitted"})
    sub = client.submit(archive)
    assert sub["state"] in ("queued", "running", "done") and sub["round"] == 1
    done = client.wait(sub["id"], timeout_s=120)
    result = done["result"]
    assert done["state"] == "done" and not done["from_store"]
    assert result["valid"] is True and result["score"] == 7.0 and result["rescaled"] == 70.0
    assert [d["status"] for d in result["details"]] == ["PASSED", "FAILED"]
    # graded through the eval path: the result file under the eval key
    evals = root / "results" / name / "evals" / "quick"
    assert (evals / f"{done['key']}.json").is_file()
    # the same bytes again: answered from the store at once, still its own round
    start = time.perf_counter()
    again = client.submit(archive)
    elapsed = time.perf_counter() - start
    assert again["state"] == "done" and again["from_store"] and again["round"] == 2
    assert again["result"]["score"] == 7.0 and again["key"] == done["key"]
    assert elapsed < 2.0  # the figure (≤ 50 ms) is measured in bench/bench_service.py
    # `sforge eval` of the same archive finds the same result file: one store, one key
    path = root / "same.tar.gz"
    path.write_bytes(archive)
    proc = subprocess.run([os.sys.executable, "-m", "sforge", "-b", str(bench_dir),
                           "--results", str(root / "results"), "eval", "--task", "quick",
                           "--archive", str(path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "already graded" in proc.stderr
    assert json.loads(proc.stdout)["key"] == done["key"]
    history = client.history()
    assert [s["round"] for s in history["submissions"]] == [1, 2]
    assert history["best"]["round"] == 1 and history["run"]["run_id"] == run_id


def test_best_follows_direction_and_hung_judge_times_out(svc):
    _, client = run_client(svc, task="low")  # minimize, timeout 3 s
    subs = [client.submit(tgz({"answer.txt": v})) for v in ("5", "2", "9")]
    hung = client.submit(tgz({"answer.txt": "1", "sleep.txt": "60"}))
    for sub in subs:
        client.wait(sub["id"], timeout_s=120)
    timed_out = client.wait(hung["id"], timeout_s=120)["result"]
    assert timed_out["valid"] is False and timed_out["timed_out"] is True
    best = client.history()["best"]
    assert best["result"]["score"] == 2.0  # the hung one's 1 never counted


def test_auth_and_isolation(svc):
    admin = ServiceClient(svc.url, svc.admin_token)
    run_a, a = run_client(svc)
    run_b, b = run_client(svc)
    sub = a.submit(tgz({"answer.txt": "3"}))
    anon = httpx.Client(base_url=svc.url)
    assert anon.get("/health").status_code == 200
    assert anon.get("/docs").status_code == 200
    assert "/v1/submissions" in anon.get("/openapi.json").json()["paths"]
    for method, path in [("GET", "/v1/runs"), ("GET", "/v1/metrics"),
                         ("GET", f"/v1/submissions/{sub['id']}"),
                         ("GET", f"/v1/runs/{run_a}/history"), ("POST", "/v1/submissions")]:
        resp = anon.request(method, path)
        assert resp.status_code == 401, (path, resp.text)
        assert "token" in resp.json()["error"]
    wrong = ServiceClient(svc.url, "not-a-token")
    with pytest.raises(ServiceError) as exc:
        wrong.history(run_a)
    assert exc.value.status == 401
    # a run reads only its own submissions and history
    for call in (lambda: b.result(sub["id"]), lambda: b.history(run_a), lambda: b.runs(),
                 lambda: b.metrics(), lambda: b.register_run("quick")):
        with pytest.raises(ServiceError) as exc:
            call()
        assert exc.value.status == 403
    assert a.result(sub["id"])["id"] == sub["id"]
    assert admin.result(sub["id"])["run_id"] == run_a
    with pytest.raises(ServiceError) as exc:
        admin.register_run("no-such-task")
    assert exc.value.status == 404 and "no-such-task" in str(exc.value)
    # the run ends: its token is revoked, what it submitted is still graded
    admin.end_run(run_a)
    with pytest.raises(ServiceError) as exc:
        a.submit(tgz({"answer.txt": "4"}))
    assert exc.value.status == 401
    assert admin.wait(sub["id"], timeout_s=120)["result"]["score"] == 3.0
    runs = {r["run_id"]: r for r in admin.runs()}
    assert runs[run_a]["state"] == "ended" and runs[run_b]["state"] == "active"
    export = admin.export(run_a)
    assert export["submissions"][0]["result"]["score"] == 3.0
    assert export["submissions"][0]["archive"].endswith(".tar.gz")
    assert "token" not in json.dumps(export["run"])


def test_budget_cooldown_and_final(svc):
    reg = ServiceClient(svc.url, svc.admin_token).register(task="quick", budget=1)
    client = ServiceClient(svc.url, reg["token"])
    sforge = ServiceClient(svc.url, reg["final_token"])
    client.submit(tgz({"answer.txt": "1"}))
    with pytest.raises(ServiceError) as exc:
        client.submit(tgz({"answer.txt": "2"}))
    assert exc.value.status == 429 and exc.value.reason == "budget"
    final = sforge.submit(tgz({"answer.txt": "3"}), final=True)  # spends no budget
    assert final["final"] and final["round"] == 2  # the refusal spent no round
    with pytest.raises(ServiceError) as exc:
        sforge.submit(tgz({"answer.txt": "4"}), final=True)
    assert exc.value.status == 409
    _, slow = run_client(svc, cooldown_s=300)
    slow.submit(tgz({"answer.txt": "5"}))
    with pytest.raises(ServiceError) as exc:
        slow.submit(tgz({"answer.txt": "6"}))
    assert exc.value.status == 429 and exc.value.reason == "cooldown"
    assert 250 < exc.value.wait_s <= 300 and exc.value.retry_after >= 250
    assert [s["round"] for s in slow.history()["submissions"]] == [1]


def test_concurrent_submissions_cannot_pass_the_budget(svc, service_setup):
    """Forty submissions of one run at once, budget 3: three accepted, the rest 429, and
    only the accepted archives are stored (a refused one must not reach the tables)."""
    import threading

    _, root, name, _ = service_setup
    run_id, token = svc.client().register_run("quick", f"race{uuid.uuid4().hex[:6]}",
                                              budget=3)
    answers: list[int] = []

    def submit(i: int) -> None:
        try:
            ServiceClient(svc.url, token, retry_503=False).submit(
                tgz({"answer.txt": str(i)}))
            answers.append(200)
        except ServiceError as exc:
            answers.append(exc.status)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(answers) == [200] * 3 + [429] * 37
    store = root / "results" / name / "submissions" / f"run-{run_id}" / "quick"
    assert len(list(store.glob("*.tar.gz"))) == 3


def test_a_run_cannot_fill_the_disk_with_archives(service_setup, tmp_path):
    """With no budget, a run's stored archives are still bounded (service.max_run_bytes):
    past it a 429 (reason storage) before anything is stored; the final workspace still
    goes in."""
    bench_dir, root, name, _ = service_setup
    config = tmp_path / "config.yaml"
    config.write_text("service:\n  max_run_bytes: 600\n")
    handle = start_service(bench_dir, tmp_path / "results", port=0, config=config)
    try:
        reg = handle.client().register(task="quick")
        agent = ServiceClient(handle.url, reg["token"])
        big = tgz({"answer.txt": "1", "notes.md": os.urandom(150).hex()})  # > 300 bytes
        assert len(big) > 300
        agent.submit(big)
        with pytest.raises(ServiceError) as exc:
            agent.submit(tgz({"answer.txt": "2", "notes.md": os.urandom(150).hex()}))
        assert exc.value.status == 429 and exc.value.reason == "storage"
        assert "max_run_bytes" in str(exc.value)
        store = tmp_path / "results" / name / "submissions" / f"run-{reg['run_id']}" / "quick"
        assert len(list(store.glob("*.tar.gz"))) == 1
        final = ServiceClient(handle.url, reg["final_token"]).submit(
            tgz({"answer.txt": "3"}), final=True)
        assert final["final"]
    finally:
        handle.stop()


def test_the_agent_cannot_make_the_final_submission(svc):
    """The final submission spends no budget or cooldown, and there is one per run: were a
    run token enough for it, the agent could buy a submission past its budget and take the
    place of the workspace sforge grades at the end. Only the run's final token (held by
    sforge, given to the container after the agent's processes are gone) makes it."""
    admin = ServiceClient(svc.url, svc.admin_token)
    reg = admin.register(task="quick", budget=1, agent="script")
    assert reg["final_token"] != reg["token"]
    agent = ServiceClient(svc.url, reg["token"])
    agent.submit(tgz({"answer.txt": "1"}))
    with pytest.raises(ServiceError) as exc:
        agent.submit(tgz({"answer.txt": "9"}), final=True)
    assert exc.value.status == 403 and "final token" in str(exc.value)
    sforge = ServiceClient(svc.url, reg["final_token"])
    with pytest.raises(ServiceError) as exc:  # and the final token makes nothing else
        sforge.submit(tgz({"answer.txt": "8"}))
    assert exc.value.status == 403
    final = sforge.submit(tgz({"answer.txt": "3"}), final=True)
    assert final["final"] and final["round"] == 2
    assert [s["round"] for s in agent.history()["submissions"]] == [1, 2]
    admin.end_run(reg["run_id"])
    with pytest.raises(ServiceError) as exc:  # revoked with the run
        sforge.submit(tgz({"answer.txt": "3"}), final=True)
    assert exc.value.status == 401


def test_bad_input(svc, service_setup):
    _, root, name, _ = service_setup
    _, client = run_client(svc)
    store = root / "results" / name / "submissions"
    before = sorted(store.rglob("*"))
    big = os.urandom(300_000)
    with pytest.raises(ServiceError) as exc:
        client.submit(big)
    assert exc.value.status == 413
    assert sorted(store.rglob("*")) == before  # nothing stored
    junk = client.submit(b"this is not a tar archive, nor gzip" * 10)
    result = client.wait(junk["id"], timeout_s=120)["result"]
    assert result["valid"] is False and "tar" in result["reason"]
    assert client.result(junk["id"])["state"] == "done"
    for sub_id, status in ((10 ** 20, 422), (0, 422), (2 ** 62, 404)):  # never a 500
        with pytest.raises(ServiceError) as exc:
            client.result(sub_id)
        assert exc.value.status == status, (sub_id, exc.value)
    # a body JSON cannot carry back (Infinity, NaN, 1e400), a start in the future, a bad
    # flag: 422 as {"error"} like every other error, never a 500
    auth = {"Authorization": f"Bearer {svc.admin_token}", "Content-Type": "application/json"}
    for body in ('{"task": "quick", "cooldown_s": Infinity}', '{"task": "quick", "budget": 1e400}',
                 '{"task": "quick", "cooldown_s": NaN}',
                 '{"task": "quick", "started_at": "9999-12-31T23:59:59Z"}'):
        raw = httpx.post(f"{svc.url}/v1/runs", content=body, headers=auth)
        assert raw.status_code == 422, (body, raw.status_code, raw.text)
        assert isinstance(raw.json()["error"], str) and raw.json()["error"], raw.text
    _, final_client = run_client(svc)
    bad_flag = httpx.post(f"{svc.url}/v1/submissions?final=maybe",
                          headers={"Authorization": f"Bearer {final_client.token}"},
                          files={"archive": ("a.tar.gz", tgz({"answer.txt": "1"}))})
    assert bad_flag.status_code == 422 and "final" in bad_flag.json()["error"], bad_flag.text


def test_a_second_service_on_the_same_results_names_the_first(svc, service_setup):
    """Starting a service (as `sforge run` does) where one already runs is refused with its
    address and what to pass instead; the running service's address file is left alone
    (it was deleted), and the error holds this attempt's words, not an old log's tail."""
    bench_dir, root, _, config = service_setup
    address = svc.directory / "address.json"
    before = address.read_bytes()
    with pytest.raises(SforgeError) as exc:
        start_service(bench_dir, root / "results", port=0, config=config)
    assert f"--service {svc.url}" in str(exc.value), exc.value
    assert "uvicorn" not in str(exc.value).lower(), exc.value
    assert address.read_bytes() == before


def test_queue_full_503_and_client_retries(service_setup):
    bench_dir, root, _, config = service_setup
    handle = start_service(bench_dir, root / "results-cap", port=0, max_concurrent=1,
                           max_pending=1, config=config)
    try:
        admin = handle.client()
        run_id, token = admin.register_run("quick", "cap")
        client = ServiceClient(handle.url, token)
        first = client.submit(tgz({"answer.txt": "1", "sleep.txt": "2"}))
        while admin.metrics()["running"] < 1:
            time.sleep(0.1)
        second = client.submit(tgz({"answer.txt": "2", "sleep.txt": "1"}))  # pending: 1
        raw = httpx.post(f"{handle.url}/v1/submissions",
                         headers={"Authorization": f"Bearer {token}"},
                         files={"archive": ("a.tar.gz", tgz({"answer.txt": "3"}))})
        assert raw.status_code == 503, raw.text
        assert int(raw.headers["retry-after"]) >= 1
        assert admin.metrics()["rejected"] >= 1
        # both clients wait per Retry-After and get in; the 503 spent no round
        from sforge.runs.helper import helper_binary

        ws = root / "ws-cap"
        ws.mkdir(exist_ok=True)
        (ws / "answer.txt").write_text("4\n")
        helper = subprocess.Popen(
            [str(helper_binary())], cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "SFORGE_SERVICE": handle.url, "SFORGE_TOKEN": token,
                            "SFORGE_SUBMIT_PATHS": '["answer.txt"]'})
        third = client.submit(tgz({"answer.txt": "3"}))
        out, err = helper.communicate(timeout=120)
        assert helper.returncode == 0, err
        assert "service busy" in err and "VALID score=4" in out
        assert client.retries >= 1
        scores = [client.wait(s["id"], timeout_s=120)["result"]["score"]
                  for s in (first, second, third)]
        assert scores == [1.0, 2.0, 3.0]
        rounds = [s["round"] for s in client.history()["submissions"]]
        assert rounds == [1, 2, 3, 4]
        # cancel drops a run's queued submissions and revokes its token
        blocker = client.submit(tgz({"answer.txt": "4", "sleep.txt": "2"}))
        while client.result(blocker["id"])["state"] != "running":
            time.sleep(0.1)
        _, other_token = admin.register_run("quick", "doomed")
        doomed = ServiceClient(handle.url, other_token).submit(tgz({"answer.txt": "5"}))
        assert admin.cancel_run("doomed")["dropped"] == [doomed["id"]]
        assert admin.result(doomed["id"])["state"] == "cancelled"
        with pytest.raises(ServiceError) as exc:
            ServiceClient(handle.url, other_token).history()
        assert exc.value.status == 401
    finally:
        assert handle.stop() == 0


def test_kill9_restart_loses_nothing(service_setup, docker_client):
    bench_dir, root, name, config = service_setup
    results = root / "results-kill"
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    admin = handle.client()
    _, token = admin.register_run("quick", "k")
    client = ServiceClient(handle.url, token)
    subs = [client.submit(tgz({"answer.txt": str(i), "sleep.txt": "3"})) for i in range(3)]
    while admin.metrics()["running"] < 1:
        time.sleep(0.1)
    time.sleep(0.5)  # the judge container is up
    pid = handle.process.pid
    assert own_containers(docker_client, pid), "a judge should be running"
    handle.kill()
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    try:
        assert not own_containers(docker_client, pid)  # swept at start
        client = ServiceClient(handle.url, token)
        done = [client.wait(s["id"], timeout_s=120) for s in subs]
        assert [d["result"]["score"] for d in done] == [0.0, 1.0, 2.0]
        assert [d["round"] for d in done] == [1, 2, 3]
        assert done[0]["interrupted"] == 1
        evals = list((results / name / "evals" / "quick").glob("*.json"))
        assert len(evals) == 3
    finally:
        assert handle.stop() == 0
    assert not own_containers(docker_client, handle.process.pid)


def test_restart_without_a_task_answers_its_runs_clearly(tmp_path, docker_client):
    """A careless operator restarts the service after removing a task that runs were
    using: their queued submissions get a result that says so (not five retries and a
    KeyError), their new submissions a 409 naming the task, their history still reads."""
    import shutil

    name = copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    results = tmp_path / "results"
    handle = start_service(tmp_path / "bench", results, port=0, max_concurrent=1)
    try:
        admin = handle.client()
        _, busy = admin.register_run("quick")
        low_run, low = admin.register_run("low")
        ServiceClient(handle.url, busy).submit(tgz({"answer.txt": "1", "sleep.txt": "30"}))
        while admin.metrics()["running"] < 1:
            time.sleep(0.1)
        queued = ServiceClient(handle.url, low).submit(tgz({"answer.txt": "2"}))
        assert queued["state"] == "queued"
        handle.kill()
        shutil.rmtree(tmp_path / "bench" / "tasks" / "low")
        # room for the slow judge (graded again) and the one whose task is gone
        handle = start_service(tmp_path / "bench", results, port=0, max_concurrent=2)
        client = ServiceClient(handle.url, low)
        done = client.wait(queued["id"], timeout_s=20)
        assert done["result"]["valid"] is False
        assert "task low is no longer in benchmark" in done["result"]["reason"]
        assert done["attempts"] <= 1
        with pytest.raises(ServiceError) as exc:
            client.submit(tgz({"answer.txt": "3"}))
        assert exc.value.status == 409 and "task low is no longer" in str(exc.value)
        assert client.history()["run"]["run_id"] == low_run
    finally:
        handle.stop()
        remove_images(docker_client, name)


def test_daemon_down_stays_queued_until_it_returns(service_setup, tmp_path):
    """The service reaches Docker through the helper's relay; with the relay down the
    submission stays queued (not invalid), and is graded once the relay is back."""
    from sforge.runs.helper import helper_binary

    bench_dir, root, _, config = service_setup
    port = free_port()
    handle = start_service(bench_dir, root / "results-down", port=0, config=config,
                           env={"DOCKER_HOST": f"tcp://127.0.0.1:{port}"})
    relay = None
    try:
        admin = handle.client()
        _, token = admin.register_run("quick", "down")
        client = ServiceClient(handle.url, token)
        sub = client.submit(tgz({"answer.txt": "8"}))
        time.sleep(1.5)
        queued = admin.result(sub["id"])
        assert queued["state"] == "queued" and queued["result"] is None
        assert "Docker" in (queued["last_error"] or ""), queued
        relay = subprocess.Popen([str(helper_binary()), "relay", f"127.0.0.1:{port}",
                                  "/var/run/docker.sock"], stderr=subprocess.DEVNULL)
        done = client.wait(sub["id"], timeout_s=120)
        assert done["result"]["valid"] and done["result"]["score"] == 8.0
    finally:
        assert handle.stop() == 0
        if relay:
            relay.terminate()
            relay.wait()


def test_sforge_submit_in_bare_containers_and_report(service_setup, tmp_path):
    """sforge-submit in busybox and the python base, --network none, the service reached
    over a bind-mounted Unix socket; the submissions then appear in `sforge report`."""
    from sforge.runs.helper import helper_binary

    bench_dir, root, name, config = service_setup
    results = root / "results-submit"
    sock_dir = tmp_path / "sock"
    handle = start_service(bench_dir, results, port=None, socket=sock_dir / "service.sock",
                           config=config)
    try:
        admin = handle.client()
        outputs = {}
        for image, answer in (("busybox:1.36", "12"), ("python:3.11-slim-bookworm", "4")):
            run_id = f"sub-{image.split(':')[0]}"
            _, token = admin.register_run("quick", run_id, source=f"run-{run_id}",
                                          agent="script", model="none", budget=1)
            ws = tmp_path / run_id
            (ws / "sub").mkdir(parents=True)
            (ws / "answer.txt").write_text(answer + "\n")
            (ws / "sub" / "big.log").write_text("left out")
            script = ("sforge-submit; echo rc=$?; sforge-submit --list; "
                      "sforge-submit; echo rc=$?")
            proc = subprocess.run(
                ["docker", "run", "--rm", "--network", "none",
                 "--label", f"sforge.test={name}",
                 "-v", f"{sock_dir}:/run/sforge", "-v", f"{ws}:/work/quick",
                 "-v", f"{helper_binary()}:/usr/local/bin/sforge-submit:ro",
                 "-w", "/work/quick", "-e", "SFORGE_SERVICE=unix:///run/sforge/service.sock",
                 "-e", f"SFORGE_TOKEN={token}",
                 "-e", 'SFORGE_SUBMIT_PATHS=["."]', "-e", 'SFORGE_SUBMIT_EXCLUDE=["sub"]',
                 image, "sh", "-c", script], capture_output=True, text=True, timeout=180)
            outputs[image] = proc
            assert proc.returncode == 0, proc.stderr
            out = proc.stdout
            assert f"VALID score={answer}" in out and f"summary: answer {answer}" in out
            assert "rc=0" in out and "rc=3" in out  # the second spends the budget of 1
            assert "refused (budget)" in proc.stderr
            assert "packed 1 file(s)" in proc.stderr  # sub/ excluded
            if answer == "4":
                assert "FAILED case2: wants 10 or more" in out
            assert "best: submission" in out
    finally:
        assert handle.stop() == 0
    report = subprocess.run([os.sys.executable, "-m", "sforge", "-b", str(bench_dir),
                             "--results", str(results), "report"],
                            capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    with open(results / name / "scores.csv") as fh:
        rows = {r["source"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"run-sub-busybox", "run-sub-python"}
    assert float(rows["run-sub-busybox"]["score"]) == 12.0
    assert rows["run-sub-python"]["agent"] == "script"
    assert float(rows["run-sub-python"]["elapsed_s"]) >= 0


def test_sforge_submit_sends_metadata(service_setup, tmp_path):
    """Modes (setgid, setuid), numeric owners and user xattrs leave the work container with
    the submission (for some tasks they are the answer); the stored archive holds them."""
    from sforge.runs.helper import helper_binary

    bench_dir, root, name, config = service_setup
    results = root / "results-meta"
    sock_dir = tmp_path / "sock"
    ws = tmp_path / "ws"
    (ws / "shared").mkdir(parents=True)
    (ws / "answer.txt").write_text("3\n")
    os.chown(ws / "shared", 0, 2345)
    os.chmod(ws / "shared", 0o2770)
    os.setxattr(ws / "shared", "user.purpose", b"research")
    tool = ws / "shared" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 1000, 2345)
    os.chmod(tool, 0o4755)
    handle = start_service(bench_dir, results, port=None, socket=sock_dir / "service.sock",
                           config=config)
    try:
        _, token = handle.client().register_run("quick", "meta", source="run-meta",
                                                agent="script", model="none")
        proc = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--label", f"sforge.test={name}",
             "-v", f"{sock_dir}:/run/sforge", "-v", f"{ws}:/work/quick",
             "-v", f"{helper_binary()}:/usr/local/bin/sforge-submit:ro", "-w", "/work/quick",
             "-e", "SFORGE_SERVICE=unix:///run/sforge/service.sock", "-e", f"SFORGE_TOKEN={token}",
             "-e", 'SFORGE_SUBMIT_PATHS=["."]', "busybox:1.36", "sforge-submit"],
            capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
    finally:
        assert handle.stop() == 0
    [stored] = (results / name / "submissions" / "run-meta" / "quick").glob("*.tar.gz")
    with tarfile.open(stored) as tar:
        members = {m.name.rstrip("/"): m for m in tar}
    shared, tool_m = members["shared"], members["shared/tool"]
    assert (shared.mode, shared.uid, shared.gid) == (0o2770, 0, 2345)
    assert shared.pax_headers.get("SCHILY.xattr.user.purpose") == "research"
    assert (tool_m.mode, tool_m.uid, tool_m.gid) == (0o4755, 1000, 2345)


def test_sigterm_drains(service_setup, docker_client):
    """SIGTERM: the running judge finishes, the queued ones wait for the next start."""
    bench_dir, root, _, config = service_setup
    results = root / "results-drain"
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    admin = handle.client()
    _, token = admin.register_run("quick", "drain")
    client = ServiceClient(handle.url, token)
    subs = [client.submit(tgz({"answer.txt": str(i), "sleep.txt": "2"})) for i in (1, 2)]
    while admin.metrics()["running"] < 1:
        time.sleep(0.1)
    assert handle.stop() == 0
    assert not own_containers(docker_client, handle.process.pid)
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    try:
        client = ServiceClient(handle.url, token)
        first = client.result(subs[0]["id"])
        assert first["state"] == "done" and first["interrupted"] == 0  # it finished
        assert first["result"]["score"] == 1.0
        second = client.wait(subs[1]["id"], timeout_s=120)
        assert second["result"]["score"] == 2.0 and second["interrupted"] == 0
    finally:
        assert handle.stop() == 0


def test_a_judge_cut_by_the_drain_leaves_no_verdict(service_setup, docker_client):
    """SIGTERM past the drain: the judge still running is stopped, and what its removed
    container left (exit 137, no result.json) is no verdict: nothing is stored, and the
    next start grades it (it was kept as an invalid result for good)."""
    bench_dir, root, name, _ = service_setup
    results = root / "results-cut"
    config = root / "config-cut.yaml"
    config.write_text("service:\n  max_upload_bytes: 200000\n  drain_s: 0.5\n")
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    admin = handle.client()
    _, token = admin.register_run("quick", "cut")
    client = ServiceClient(handle.url, token)
    sub = client.submit(tgz({"answer.txt": "3", "sleep.txt": "6"}))
    while admin.metrics()["running"] < 1:
        time.sleep(0.1)
    time.sleep(1.0)  # the judge container is up
    assert handle.stop() == 0
    assert not own_containers(docker_client, handle.process.pid)
    assert not list((results / name / "evals" / "quick").glob("*.json"))
    handle = start_service(bench_dir, results, port=0, max_concurrent=1, config=config)
    try:
        done = ServiceClient(handle.url, token).wait(sub["id"], timeout_s=120)
        assert done["result"]["valid"] and done["result"]["score"] == 3.0, done
        assert done["interrupted"] == 1
    finally:
        assert handle.stop() == 0


def test_service_and_sforge_grade_judge_each_key_once(tmp_path, docker_client):
    """The service and `sforge grade` on one results directory at once: the per-key claim
    of the one grading function lets each key be judged by one of them only."""
    name = copy_bench(FIXTURES / "servicebench", tmp_path / "bench")
    bench_dir, results = tmp_path / "bench", tmp_path / "results"
    archives = [tgz({"answer.txt": str(i), "sleep.txt": "1"}) for i in range(4)]
    try:
        handle = start_service(bench_dir, results, port=0, max_concurrent=2)
        try:
            admin = handle.client()
            admin.register_run("quick", "warm")  # judge image built before the race
            _, token = admin.register_run("quick", "both", source="run-both")
            client = ServiceClient(handle.url, token)
            client.wait(client.submit(tgz({"answer.txt": "9"}))["id"], timeout_s=120)
            judge = next(t for i in docker_client.images.list() for t in i.tags
                         if t.startswith(f"{name}.judge.quick:"))
            for i, data in enumerate(archives):
                path = bench_dir / "submissions" / "batch" / "quick" / f"a{i}.tar.gz"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            time.sleep(1.5)  # `docker events --since` counts whole seconds
            since = int(time.time())
            grade = subprocess.Popen([os.sys.executable, "-m", "sforge", "-b", str(bench_dir),
                                      "--results", str(results), "grade", "-j", "2"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            subs = [client.submit(data) for data in archives]
            done = [client.wait(s["id"], timeout_s=180)["result"] for s in subs]
            out, err = grade.communicate(timeout=300)
            assert grade.returncode == 0, err
        finally:
            assert handle.stop() == 0
        assert [r["score"] for r in done] == [0.0, 1.0, 2.0, 3.0]
        events = subprocess.run(
            ["docker", "events", "--since", str(since), "--until", str(int(time.time()) + 1),
             "--filter", "event=create", "--filter", f"image={judge}",
             "--format", "{{.ID}}"], capture_output=True, text=True, timeout=60)
        assert len(events.stdout.split()) == 4, events.stdout  # one judge per key
    finally:
        remove_images(docker_client, name)


def test_service_bound_to_its_parent_exits_when_the_parent_is_killed(service_setup, tmp_path):
    """`sforge run` starts its own service bound to itself: kill -9 of the run must not
    leave that service behind; a service not bound to its starter outlives it."""
    bench_dir, root, _, _ = service_setup
    script = (
        "import sys, time\n"
        "from sforge.service.launch import start_service\n"
        "bound = sys.argv[3] == 'bound'\n"
        "h = start_service(sys.argv[1], sys.argv[2], port=None,\n"
        "                  socket=sys.argv[2] + '/svc.sock', bound_to_parent=bound)\n"
        "print(h.process.pid, flush=True)\n"
        "time.sleep(300)\n")
    pids = {}
    for mode in ("bound", "free"):
        results = tmp_path / mode
        results.mkdir()
        parent = subprocess.Popen([os.sys.executable, "-c", script, str(bench_dir),
                                   str(results), mode], stdout=subprocess.PIPE, text=True)
        pids[mode] = int(parent.stdout.readline())
        parent.kill()
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as fh:  # a zombie has exited
            return fh.read().split(")")[1].split()[0] != "Z"

    deadline = time.monotonic() + 30
    while alive(pids["bound"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert not alive(pids["bound"]), "a bound service outlived its killed parent"
        assert alive(pids["free"]), "an unbound service must outlive its starter"
    finally:
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, 15)
