"""Who is calling: the bearer token as the admin or as one run (its agent's token or its final
token), the FastAPI dependencies that check it, and the JSON error every endpoint answers."""

# No `from __future__ import annotations`: FastAPI reads the dependency annotations.
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from sforge.service import auth
from sforge.service.core import Service


class ApiError(Exception):
    """An answer other than 2xx: {"error": message, **extra} with the status and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


@dataclass
class Caller:
    """The admin, or one run (and whether with the run's final token)."""

    admin: bool
    run: dict[str, Any] | None = None
    final: bool = False   # the run's final token (sforge's own), not the agent's


def dependencies(service: Service) -> tuple[Any, Any]:
    """(Who, Admin): the annotated endpoint parameter types for any caller with a valid
    token (401 otherwise) and for the admin only (403 for a run token)."""

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

    return Who, Annotated[Caller, Depends(admin)]


def run_of(service: Service, who: Caller, run_id: str) -> dict[str, Any]:
    """The run `run_id` names (`me`: the caller's), if this caller may read it."""
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
