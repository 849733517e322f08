"""The game endpoints (run token; the admin may read and close). Errors as elsewhere:
{"error": message, ...}; 403 another run's session, 404 unknown, 409 not a game / a run
not active / an open session already / a step in flight, 410 the session is over (its
status in "session"), 413 a request over the cap, 422 a request that is not JSON, 429 the
run's sessions spent or the step rate ({"reason", "wait_s"}, Retry-After), 502/504 the game
server broke or did not answer (the session ends, recorded), 503 the service is full.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from sforge.service.access import ApiError
from sforge.service.bodies import read_capped
from sforge.service.games import GameError, GameSessions


def add_game_routes(app: FastAPI, sessions: GameSessions, who_type: Any) -> None:
    """/v1/games and /v1/games/{sid}/…"""
    Who: Any = who_type  # an Annotated dependency type, made by the caller

    def fail(exc: GameError) -> Exception:
        return ApiError(exc.status, exc.message, exc.headers, **exc.extra)

    def run_only(who) -> dict[str, Any]:
        if who.run is None or who.final:
            raise ApiError(403, "game sessions are played with a run token")
        return who.run

    def own(who, sid: str) -> dict[str, Any]:
        try:
            return sessions.own(who.run, who.admin, sid)
        except GameError as exc:
            raise fail(exc) from None

    @app.post("/v1/games", status_code=201, tags=["games"])
    def new_session(who: Who) -> dict[str, Any]:
        """Start a game session of the run's task (run token): a fresh game server, its
        first line as "hello". 429 sessions spent, 409 one already open, 503 full."""
        try:
            return sessions.new(run_only(who))
        except GameError as exc:
            raise fail(exc) from None

    @app.get("/v1/games", tags=["games"])
    def list_sessions(who: Who, run: str | None = None) -> dict[str, Any]:
        """The run's sessions (a run token sees its own; the admin any run's, or all)."""
        if not who.admin:
            run = run_only(who)["run_id"]
        return {"sessions": sessions.sessions(run)}

    @app.post("/v1/games/{sid}/step", tags=["games"], openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"description": "the game's own request: one JSON value"}}}}})
    async def step(sid: str, request: Request, who: Who) -> Response:
        """One request to the game; the body of the answer is the game's reply as it wrote
        it. Headers: Sforge-Step (the step number), Sforge-Session-State (open, finished),
        and once the game is over Sforge-Score and Sforge-Valid. `current` = the run's
        newest session."""
        run_only(who)
        row = own(who, sid)
        limit = int(sessions.settings["max_step_bytes"])
        body = await read_capped(request, limit,  # never held whole when it is too big
                                 lambda: ApiError(413, f"request over {limit} bytes"))
        try:
            reply, status = await run_in_threadpool(sessions.step, row, body)
        except GameError as exc:
            raise fail(exc) from None
        headers = {"Sforge-Step": str(status.get("steps", "")),
                   "Sforge-Session-State": str(status["state"])}
        result = status.get("result")
        if result:
            headers["Sforge-Valid"] = "true" if result.get("valid") else "false"
            if result.get("score") is not None:
                headers["Sforge-Score"] = repr(float(result["score"]))
        return Response(reply, media_type="application/json", headers=headers)

    @app.get("/v1/games/{sid}", tags=["games"])
    def status(sid: str, who: Who) -> dict[str, Any]:
        """The session: state, steps, time left, and its result once ended."""
        return sessions.status(own(who, sid)["id"])

    @app.post("/v1/games/{sid}/close", tags=["games"])
    def close(sid: str, who: Who) -> dict[str, Any]:
        """End the session now; its score so far is recorded (an unfinished game is not
        a valid result)."""
        return sessions.close(own(who, sid))

    @app.get("/v1/games/{sid}/transcript", tags=["games"])
    def transcript(sid: str, who: Who) -> Response:
        """The session's step record (JSON lines: the opening line, then one per step)."""
        row = own(who, sid)
        try:
            data = Path(row["transcript"]).read_bytes()
        except OSError:
            data = b""
        return Response(data, media_type="application/x-ndjson")
