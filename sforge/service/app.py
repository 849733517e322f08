"""The HTTP endpoints (FastAPI). Every endpoint but /health and the OpenAPI docs needs a
bearer token: the admin's, or a run's (which sees only its own run).

Errors are JSON objects {"error": message, ...}: 401 no or unknown token, 403 another
run's data, an admin endpoint, or a final submission without the run's final token (or a
final token used for anything else), 404 unknown run, task or submission, 409 a run not
active or a second final submission, 413 an archive over the upload cap (nothing stored),
429 budget or cooldown ({"reason", "wait_s"}), 503 queue full or draining (Retry-After).
"""

# No `from __future__ import annotations`: FastAPI reads the dependency annotations of
# the endpoints, which name types local to create_app.
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from sforge import __version__
from sforge.benchmark.games import is_game
from sforge.service import auth
from sforge.service.core import Service
from sforge.service.state import Busy, Conflict, Refused

MAX_WAIT_S = 60.0


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


@dataclass
class Caller:
    admin: bool
    run: dict[str, Any] | None = None
    final: bool = False   # the run's final token (sforge's own), not the agent's


class RunIn(BaseModel):
    task: str = Field(description="task id of the benchmark")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
                               description="default: a random id")
    source: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
                               description="name in the score tables (default run-<run_id>)")
    agent: str | None = None
    model: str | None = None
    budget: int | None = Field(None, ge=0, le=2**62, description="submissions allowed "
                               "(default: config.yaml service.budget; final not counted)")
    cooldown_s: float | None = Field(None, ge=0, le=10**9, allow_inf_nan=False,
                                     description="seconds between submissions "
                                     "(default: config.yaml service.cooldown_s)")
    started_at: str | None = Field(None, description="ISO 8601 start of the run: elapsed_s "
                                   "counts from here (default: now)")


def create_app(service: Service) -> FastAPI:
    from sforge.service.games import GameSessions

    games = GameSessions(service)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        games.start()  # ends the sessions a dead service left, before any sweep
        service.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            # uvicorn has stopped accepting; end game sessions and drain judges without
            # blocking the loop
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, games.stop)
            await loop.run_in_executor(None, service.stop)

    app = FastAPI(title="sforge judge service", version=__version__, lifespan=lifespan,
                  description=__doc__)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        if exc.status in (413, 429, 503):
            service.state.bump(f"rejected_{exc.status}")
        return JSONResponse({"error": exc.message, **exc.extra}, status_code=exc.status,
                            headers=exc.headers)

    # auth ---------------------------------------------------------------------------
    def caller(request: Request) -> Caller:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "missing bearer token (Authorization: Bearer TOKEN)",
                           {"WWW-Authenticate": "Bearer"})
        token = token.strip()
        if auth.same(token, service.admin_token):
            return Caller(admin=True)
        found = service.state.run_by_token(auth.token_hash(token))
        if found is None:
            raise ApiError(401, "unknown or revoked token", {"WWW-Authenticate": "Bearer"})
        return Caller(admin=False, run=found[0], final=found[1])

    Who = Annotated[Caller, Depends(caller)]

    def admin(who: Who) -> Caller:
        if not who.admin:
            raise ApiError(403, "this endpoint needs the admin token")
        return who

    Admin = Annotated[Caller, Depends(admin)]

    def run_of(who: Caller, run_id: str) -> dict[str, Any]:
        if run_id == "me":
            if who.run is None:
                raise ApiError(400, "'me' means the run of a run token; name the run")
            return who.run
        if not who.admin and (who.run is None or who.run["run_id"] != run_id):
            raise ApiError(403, "a run token reads only its own run")
        run = service.state.run(run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id!r}")
        return run

    def public(sub: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in sub.items()
               if k not in ("archive", "not_before", "cpus")}
        return out

    def history_of(run: dict[str, Any], archives: bool = False) -> dict[str, Any]:
        """`archives`: each submission with its stored archive's path (the admin's export);
        one read of the history, so a submission arriving meanwhile cannot skew it."""
        subs = [dict(public(s), archive=s["archive"]) if archives else public(s)
                for s in service.state.history(run["run_id"])]
        task = service.pipe.bench.tasks.get(run["task"])
        run = dict(run, direction=task.score.direction if task else None)
        if task is not None and is_game(task):
            # played, not submitted: the best finished session is the run's result
            sessions = games.sessions(run["run_id"])
            best = service.best([dict(s, round=s["index"]) for s in sessions], task.id)
            return {"run": run, "submissions": subs, "sessions": sessions, "best": best}
        return {"run": run, "submissions": subs, "best": service.best(subs, run["task"])}

    # endpoints ----------------------------------------------------------------------
    @app.get("/health", tags=["service"])
    def health() -> dict[str, Any]:
        """No token needed: is the service up, and is it draining."""
        return {"ok": True, "draining": service.draining, "benchmark": service.pipe.bench.name,
                "version": __version__}

    @app.get("/v1/metrics", tags=["service"])
    def metrics(_: Admin) -> dict[str, Any]:
        """Queue length, running judges, graded and rejected submissions (admin)."""
        counts = service.state.counts()
        counters = service.state.counters()
        rejected = {k.removeprefix("rejected_"): v for k, v in counters.items()
                    if k.startswith("rejected_")}
        return {"queued": counts["queued"], "running": counts["running"],
                "graded": counts["done"], "cancelled": counts["cancelled"],
                "rejected": sum(rejected.values()), "rejected_by_status": rejected,
                "capacity_cpus": service.capacity, "busy_cpus": service.scheduler.busy,
                "max_pending": service.limits.max_pending,
                "mean_judge_s": round(service.scheduler.mean_duration(), 3),
                "uptime_s": round(__import__("time").time() - service.started, 1),
                "draining": service.draining}

    @app.post("/v1/runs", status_code=201, tags=["runs"])
    def register_run(body: RunIn, _: Admin) -> dict[str, Any]:
        """Register a run of one task (admin). Its two tokens are shown only here: `token`
        for the agent, `final_token` for whoever packs the run's last workspace once the
        agent is stopped (the final submission spends no budget, so the agent must not be
        able to make it)."""
        if body.task not in service.pipe.bench.tasks:
            raise ApiError(404, f"unknown task {body.task!r} in benchmark "
                                f"{service.pipe.bench.name}")
        if body.started_at is not None:
            from sforge.service.state import parse_iso

            try:
                parse_iso(body.started_at)
            except ValueError:
                raise ApiError(422, f"started_at: expected ISO 8601, got "
                                    f"{body.started_at!r}") from None
        try:
            run, token, final = service.register(body.task, body.run_id, body.source,
                                                 body.agent, body.model, body.budget,
                                                 body.cooldown_s, body.started_at)
        except Conflict as exc:
            raise ApiError(409, str(exc)) from None
        return {"run": run, "run_id": run["run_id"], "token": token, "final_token": final}

    @app.get("/v1/runs", tags=["runs"])
    def list_runs(_: Admin) -> dict[str, Any]:
        """Every run with its state and counts (admin)."""
        return {"runs": service.state.runs()}

    @app.get("/v1/runs/{run_id}/history", tags=["runs"])
    def history(run_id: str, who: Who) -> dict[str, Any]:
        """The run's submissions, every round, and its best valid score in the task's
        direction. `me` is the run of the token."""
        return history_of(run_of(who, run_id))

    @app.get("/v1/runs/{run_id}/export", tags=["runs"])
    def export(run_id: str, _: Admin) -> JSONResponse:
        """The run's full history as a JSON file (admin)."""
        run = service.state.run(run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id!r}")
        return JSONResponse(history_of(run, archives=True), headers={
            "Content-Disposition": f'attachment; filename="run-{run_id}.json"'})

    @app.post("/v1/runs/{run_id}/end", tags=["runs"])
    def end_run(run_id: str, _: Admin) -> dict[str, Any]:
        """The run is over: its token is revoked; what it submitted is still graded."""
        if service.state.run(run_id) is None:
            raise ApiError(404, f"no run {run_id!r}")
        service.state.end_run(run_id, "ended")
        games.end_run(run_id, "the run ended")
        return {"run": service.state.run(run_id)}

    @app.post("/v1/runs/{run_id}/cancel", tags=["runs"])
    def cancel_run(run_id: str, _: Admin) -> dict[str, Any]:
        """Cancel a run: its token is revoked and its queued submissions dropped."""
        if service.state.run(run_id) is None:
            raise ApiError(404, f"no run {run_id!r}")
        dropped = service.state.end_run(run_id, "cancelled")
        service.wake(dropped)
        games.end_run(run_id, "the run was cancelled")
        return {"run": service.state.run(run_id), "dropped": dropped}

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
        final = request.query_params.get("final", "").lower() in ("1", "true", "yes")
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
        return JSONResponse(public(sub), status_code=200 if sub["state"] == "done" else 202)

    def precheck(run: dict[str, Any], final: bool) -> None:
        """Refuse before reading the upload: a full queue costs the service almost nothing."""
        import time

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
        import time

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
        return public(sub)

    from sforge.service.game_routes import add_game_routes

    add_game_routes(app, games, Who, ApiError)
    return app


async def read_form(request: Request, cap: int):
    """Parse the multipart body, refusing (413) once it passes `cap` bytes: the upload is
    spooled to a temporary file, never the store, until it is accepted."""
    from starlette.datastructures import FormData
    from starlette.formparsers import MultiPartException, MultiPartParser

    from sforge.service.bodies import capped

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
