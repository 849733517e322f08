"""The run endpoints: register a run (admin), list, history, export, end and cancel."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import time
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from sforge.benchmark.games import is_game
from sforge.core.clock import now_iso
from sforge.service.access import ApiError, run_of
from sforge.service.core import Service
from sforge.service.games import GameSessions
from sforge.service.state import Conflict, parse_iso
from sforge.service.submission_routes import public_submission

CLOCK_SKEW_S = 60.0  # how far ahead of the service's clock a run's start may be


# The body of POST /v1/runs. (No docstring: pydantic would publish it in the OpenAPI schema.)
class RunIn(BaseModel):
    """The body of POST /v1/runs: the task and what the run is called and allowed."""
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


def add_run_routes(app: FastAPI, service: Service, games: GameSessions, who_type: Any,
                   admin_type: Any) -> None:
    """/v1/runs and /v1/runs/{run_id}/…"""
    Who: Any = who_type  # Annotated dependency types, made by the caller
    Admin: Any = admin_type

    def history_of(run: dict[str, Any], archives: bool = False) -> dict[str, Any]:
        """`archives`: each submission with its stored archive's path (the admin's export);
        one read of the history, so a submission arriving meanwhile cannot skew it."""
        subs = [dict(public_submission(s), archive=s["archive"]) if archives
                else public_submission(s)
                for s in service.state.history(run["run_id"])]
        task = service.pipe.bench.tasks.get(run["task"])
        run = dict(run, direction=task.score.direction if task else None)
        if task is not None and is_game(task):
            # played, not submitted: the best finished session is the run's result
            sessions = games.sessions(run["run_id"])
            best = service.best([dict(s, round=s["index"]) for s in sessions], task.id)
            return {"run": run, "submissions": subs, "sessions": sessions, "best": best}
        return {"run": run, "submissions": subs, "best": service.best(subs, run["task"])}

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
            try:
                started = parse_iso(body.started_at)
            except (ValueError, OverflowError):
                raise ApiError(422, f"started_at: expected ISO 8601, got "
                                    f"{body.started_at!r}") from None
            if started > time.time() + CLOCK_SKEW_S:  # every elapsed_s would be negative
                raise ApiError(422, f"started_at: {body.started_at!r} is in the future "
                                    f"(the service's clock says {now_iso('seconds')})")
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
        return history_of(run_of(service, who, run_id))

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
