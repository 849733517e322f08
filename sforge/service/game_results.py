"""A game session as a result of its run: its transcript stored as the run's archive and its
score written under that archive's eval key, re-scored by [judge] cmd when the server is gone."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import tarfile
import time
from pathlib import Path
from typing import Any

from sforge import __version__
from sforge.benchmark.games import TRANSCRIPT
from sforge.benchmark.model import Task
from sforge.benchmark.submissions import store_archive
from sforge.core.clock import now_iso
from sforge.core.errors import SforgeError
from sforge.grading.results import EvalResult
from sforge.service.core import Service
from sforge.service.game_server import Session
from sforge.service.state import parse_iso
from sforge.workflow.targets import grade

log = logging.getLogger("sforge.service")


def record_session(service: Service, sess: Session, state: str, why: str, problem: str | None,
                   fields: dict[str, Any], present: bool) -> dict[str, Any]:
    """The session as a result of its run: transcript archive in the store, eval
    result under its key. The result is written first, so the store never holds a
    session archive without its result."""
    task = sess.task
    run = service.state.run(sess.run_id) or {}
    source = run.get("source") or f"run-{sess.run_id}"
    data = transcript_archive(sess.transcript)
    sha = _sha256(data)
    judge = service.pipe.refs[task.id]["judge"].tag
    key = service.pipe.eval_target(task.id, sha, sess.transcript).key
    started = run.get("started_at")
    now = time.time()
    elapsed = round(now - parse_iso(started), 3) if started else None
    meta = {"elapsed_s": elapsed, "agent": run.get("agent"), "model": run.get("model")}
    if not present and state != "finished":
        # The container is gone (swept after a crash): the score so far is what
        # [judge] cmd makes of the transcript, through the one grading function.
        problem, fields, present = replay_transcript(service, task, source, data, now, meta)
    score = fields.get("score")
    valid = bool(fields.get("valid")) and state == "finished" and not problem
    reason = None
    if state != "finished":
        reason = f"session {state} before the game was over: {why}"
        if score is not None:
            reason += f" (score so far {score:g})"
    elif problem or not present:
        reason = problem or "the game server left no /opt/sforge/result.json"
    elif not fields.get("valid"):
        reason = "the game judged the session invalid"
    result = EvalResult(
        task=task.id, submission=sha, key=key, valid=valid, score=score,
        summary=fields.get("summary") or reason or "", details=fields.get("details", []),
        metrics=fields.get("metrics", {}), reason=reason,
        duration_s=round(now - sess.created_ts, 3),
        started_at=now_iso("milliseconds", sess.created_ts),
        finished_at=now_iso("milliseconds", now), judge_image=judge,
        judge_settings=task.judge_settings(),
        sforge_version=__version__, log=str(sess.server.log_path))
    result.write(service.pipe.layout.eval_result(task.id, key))
    store_archive(service.pipe.layout.store, source, task.id, io.BytesIO(data),
                  now_iso("milliseconds", now), meta)
    view = service.view(result, source)
    return {k: view.get(k) for k in ("valid", "score", "rescaled", "summary", "reason",
                                     "key", "submission", "details", "metrics")}


def replay_transcript(service: Service, task: Task, source: str, data: bytes, now: float,
                      meta: dict[str, Any]) -> tuple[str | None, dict[str, Any], bool]:
    """The score so far of a session whose server is gone: [judge] cmd on its transcript."""
    try:
        service.prepare(task.id)
        sub = store_archive(service.pipe.layout.store, source, task.id, io.BytesIO(data),
                            now_iso("milliseconds", now), meta)
        result = grade(service.pipe, service.pipe.eval_target(task.id, sub.sha256, sub.path))
    except SforgeError as exc:
        log.warning("cannot re-score the transcript of %s: %s", task.id, exc)
        return str(exc), {}, False
    fields = {"valid": result.valid, "score": result.score, "summary": result.summary,
              "details": result.details, "metrics": result.metrics}
    return None, fields, True


def transcript_archive(transcript: Path) -> bytes:
    """The session's transcript as a submission archive (deterministic bytes)."""
    data = transcript.read_bytes() if transcript.is_file() else b""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(TRANSCRIPT)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
