"""The submission endpoints: upload an archive (run token), read a submission and its result
(long poll up to MAX_WAIT_S)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import time
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException, MultiPartParser

from sforge.benchmark.games import is_game
from sforge.service.access import ApiError
from sforge.service.bodies import capped
from sforge.service.core import Service
from sforge.service.state import Busy, Conflict, Refused

MAX_WAIT_S = 60.0


def public_submission(sub: dict[str, Any]) -> dict[str, Any]:
    """A submission as a caller sees it: without its archive path and scheduling fields."""
    out = {k: v for k, v in sub.items()
           if k not in ("archive", "not_before", "cpus")}
    return out


def add_submission_routes(app: FastAPI, service: Service, who_type: Any) -> None:
    """/v1/submissions and /v1/submissions/{sub_id}."""
    Who: Any = who_type  # an Annotated dependency type, made by the caller

    @app.post("/v1/submissions", status_code=202, tags=["submissions"], openapi_extra={
        "parameters": [{"name": "final", "in": "query", "required": False,
                        "schema": {"type": "boolean", "default": False},
                        "description": "the run's last workspace (once per run, with the "
                                       "run's final token; spends no budget or "
                                       "cooldown)"}],
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["archive"], "properties": {
                "archive": {"type": "string", "format": "binary",
                            "description": "the submission: .tar.gz or .tar"}}}}}}})
    async def submit(request: Request, who: Who) -> JSONResponse:
        """Submit an archive (run token). 202 with the queued submission, or 200 with its
        result when the same archive was graded before under the same judge and settings."""
        if who.run is None:
            raise ApiError(403, "submissions need a run token (register a run first)")
        cap = int(service.settings["max_upload_bytes"])
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > cap + 64 * 1024:
            raise ApiError(413, f"archive over the upload cap of {cap} bytes")
        flag = request.query_params.get("final", "").lower()
        if flag not in ("", "0", "false", "no", "1", "true", "yes"):
            raise ApiError(422, f"final: expected true or false, got {flag!r}")
        final = flag in ("1", "true", "yes")
        if final != who.final:
            raise ApiError(403, "the final submission is made with the run's final token "
                                "(sforge's, at the end of the run), and only it"
                           if final else "a final token makes only the final submission "
                                         "(?final=true)")
        precheck(who.run, final)
        form = await read_form(request, cap)
        try:
            upload = form.get("archive")
            if upload is None or isinstance(upload, str):
                raise ApiError(422, "multipart field 'archive' (the file) is missing")
            try:
                # hashing and storing up to max_upload_bytes: off the event loop, which
                # every other run's calls (long polls, game steps) share
                sub = await run_in_threadpool(service.submit, who.run, upload.file, final)
            except Refused as exc:
                raise refused(exc) from None
            except Busy as exc:
                raise busy(exc, who.run["run_id"]) from None
            except Conflict as exc:
                raise ApiError(409, str(exc)) from None
        finally:
            await form.close()
        refused_at.pop(who.run["run_id"], None)
        return JSONResponse(public_submission(sub),
                            status_code=200 if sub["state"] == "done" else 202)

    def precheck(run: dict[str, Any], final: bool) -> None:
        """Refuse before reading the upload: a full queue costs the service almost nothing."""
        if service.draining:
            raise ApiError(503, "the service is shutting down", {"Retry-After": "10"})
        task = service.pipe.bench.tasks.get(run["task"])
        if task is None:
            raise ApiError(409, service.gone(run["task"]))
        if is_game(task):
            raise ApiError(409, f"task {task.id} is a game: it takes no archives (play it "
                                "with sforge-game)")
        try:
            service.state.check(run, final, service.limits, time.time())
        except Refused as exc:
            raise refused(exc) from None
        except Busy as exc:
            raise busy(exc, run["run_id"]) from None
        except Conflict as exc:
            raise ApiError(409, str(exc)) from None

    def refused(exc: Refused) -> ApiError:
        headers = {"Retry-After": str(max(1, round(exc.wait_s + 0.5)))} if exc.wait_s else None
        return ApiError(429, exc.message, headers, reason=exc.reason,
                        wait_s=round(exc.wait_s, 2) if exc.wait_s else None)

    refused_at: dict[str, float] = {}  # run -> its last 503, until it gets in

    def busy(exc: Busy, run_id: str) -> ApiError:
        now = time.monotonic()
        refused_at[run_id] = now
        for rid in [r for r, t in refused_at.items() if now - t > 120]:
            del refused_at[rid]
        queued = int(exc.args[0]) if exc.args else service.limits.max_pending
        wait = service.scheduler.retry_after(len(refused_at))
        return ApiError(503, f"the judge queue is full ({queued} waiting); retry later",
                        {"Retry-After": str(wait)}, reason="queue full", wait_s=wait)

    @app.get("/v1/submissions/{sub_id}", tags=["submissions"])
    async def result(sub_id: Annotated[int, Path(ge=1, le=2 ** 63 - 1,
                                                 description="the submission's id")],
                     who: Who, wait: Annotated[float, Query(
            ge=0, description=f"seconds to wait for the verdict (at most {MAX_WAIT_S:g})")
    ] = 0) -> dict:
        """One submission and, once graded, its result."""
        sub = service.state.submission(sub_id)
        if sub is None:
            raise ApiError(404, f"no submission {sub_id}")
        if not who.admin and (who.run is None or who.run["run_id"] != sub["run_id"]):
            raise ApiError(403, "a run token reads only its own submissions")
        if wait and sub["state"] in ("queued", "running"):
            await service.wait(sub_id, min(wait, MAX_WAIT_S))
            sub = service.state.submission(sub_id) or sub
        return public_submission(sub)


async def read_form(request: Request, cap: int) -> FormData:
    """Parse the multipart body, refusing (413) once it passes `cap` bytes: the upload is
    spooled to a temporary file, never the store, until it is accepted."""
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise ApiError(415, "expected multipart/form-data with the archive in field 'archive'")
    body = capped(request, cap + 64 * 1024,  # the archive plus the multipart framing
                  lambda: ApiError(413, f"archive over the upload cap of {cap} bytes"))
    try:
        form: FormData = await MultiPartParser(request.headers, body,
                                               max_files=1, max_fields=10).parse()
    except MultiPartException as exc:
        raise ApiError(400, f"bad multipart body: {exc.message}") from None
    archive = form.get("archive")
    if archive is not None and not isinstance(archive, str) and archive.size is not None \
            and archive.size > cap:
        await form.close()
        raise ApiError(413, f"archive over the upload cap of {cap} bytes")
    return form
