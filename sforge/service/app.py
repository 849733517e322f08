"""The HTTP endpoints (FastAPI). Every endpoint but /health and the OpenAPI docs needs a
bearer token: the admin's, or a run's (which sees only its own run).

Errors are JSON objects {"error": message, ...}: 401 no or unknown token, 403 another
run's data, an admin endpoint, or a final submission without the run's final token (or a
final token used for anything else), 404 unknown run, task or submission, 409 a run not
active or a second final submission, 413 an archive over the upload cap (nothing stored),
422 a request that does not fit its schema ({"error", "problems"}), 429 budget or cooldown
({"reason", "wait_s"}), 503 queue full or draining (Retry-After).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from sforge import __version__
from sforge.service.access import ApiError, dependencies
from sforge.service.core import Service
from sforge.service.game_routes import add_game_routes
from sforge.service.games import GameSessions
from sforge.service.run_routes import add_run_routes
from sforge.service.status_routes import add_status_routes
from sforge.service.submission_routes import add_submission_routes


def create_app(service: Service) -> FastAPI:
    """The service's FastAPI app: every endpoint group, game sessions started and stopped
    with it, errors answered as JSON."""
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

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # the same {"error"} shape as every other refusal; the offending input is not echoed
        # back (JSON cannot carry an Infinity or NaN it held)
        problems = [f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: "
                    f"{e.get('msg', 'invalid')}" for e in exc.errors()]
        return JSONResponse({"error": "; ".join(problems) or "invalid request",
                             "problems": problems}, status_code=422)

    Who, Admin = dependencies(service)
    add_status_routes(app, service, Admin)
    add_run_routes(app, service, games, Who, Admin)
    add_submission_routes(app, service, Who)
    add_game_routes(app, games, Who)
    return app
