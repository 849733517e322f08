"""The Python client of the judge service (`sforge run` uses it; so do the tests).

    admin = ServiceClient("unix:///run/sforge/service.sock", admin_token)
    run_id, token = admin.register_run("alpha", "r1", source="run-r1-0", agent="a", model="m")
    sub = ServiceClient(url, token).submit(Path("ws.tar.gz"))
    result = ServiceClient(url, token).wait(sub["id"])["result"]

A 503 (queue full, draining) is retried after its Retry-After; other errors raise
ServiceError with the HTTP status and the service's message (429: `.reason`, `.wait_s`).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx

from sforge.core.errors import SforgeError


class ServiceError(SforgeError):
    """An error answer of the service: its HTTP status, message and (429) reason and wait."""
    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None,
                 retry_after: float | None = None):
        super().__init__(f"judge service: HTTP {status}: {message}")
        self.status = status
        self.body = body or {}
        self.reason = self.body.get("reason")
        self.wait_s = self.body.get("wait_s")
        self.retry_after = retry_after


class ServiceClient:
    """One caller of the judge service (admin or run token), over HTTP or a Unix socket."""
    def __init__(self, url: str, token: str | None = None, timeout: float = 120.0,
                 retry_503: bool = True, max_retry_s: float | None = None):
        self.url = url
        self.token = token
        self.retry_503 = retry_503
        self.max_retry_s = max_retry_s  # give up retrying 503s after this long (None: never)
        self.retries = 0                # 503s waited out so far
        if url.startswith("unix://"):
            transport = httpx.HTTPTransport(uds=url.removeprefix("unix://"))
            base = "http://sforge"
        elif url.startswith(("http://", "https://")):
            # TCP_NODELAY: a request's headers and body leave at once, not after a
            # delayed ACK (~40 ms per submission otherwise)
            transport = httpx.HTTPTransport(socket_options=[
                (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            base = url.rstrip("/")
        else:
            raise SforgeError(f"service URL {url!r}: expected http://host:port or "
                              "unix:///path/to.sock")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base, transport=transport, headers=headers,
                                 timeout=timeout)

    def with_token(self, token: str) -> ServiceClient:
        """A client for the same service that authenticates with another token."""
        return ServiceClient(self.url, token, self.http.timeout.read or 120.0,
                             self.retry_503, self.max_retry_s)

    def close(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        self.http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # plumbing -----------------------------------------------------------------------
    def _call(self, method: str, path: str, raw: bool = False, **kw: Any) -> Any:
        start = time.monotonic()
        while True:
            try:
                resp = self.http.request(method, path, **kw)
            except httpx.HTTPError as exc:
                raise ServiceError(0, f"cannot reach {self.url}: {exc}") from None
            if resp.status_code == 503 and self.retry_503:
                wait = _retry_after(resp)
                if self.max_retry_s is None or time.monotonic() - start + wait \
                        <= self.max_retry_s:
                    self.retries += 1
                    time.sleep(wait)
                    continue
            if resp.status_code >= 400:
                try:
                    body = resp.json()
                except ValueError:
                    body = {"error": resp.text}
                message = body.get("error") if isinstance(body, dict) else None
                raise ServiceError(resp.status_code, message or resp.text,
                                   body if isinstance(body, dict) else None,
                                   _retry_after(resp) if "retry-after" in resp.headers
                                   else None)
            return resp if raw else resp.json()

    # endpoints ----------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Whether the service is up and draining, its benchmark and version; needs no token."""
        return self._call("GET", "/health")

    def metrics(self) -> dict[str, Any]:
        """Queue length, running judges, graded and rejected submissions (admin)."""
        return self._call("GET", "/v1/metrics")

    def register_run(self, task: str, run_id: str | None = None, source: str | None = None,
                     agent: str | None = None, model: str | None = None,
                     budget: int | None = None, cooldown_s: float | None = None,
                     started_at: str | None = None) -> tuple[str, str]:
        """Register a run (admin token); returns (run_id, run token)."""
        out = self.register(task=task, run_id=run_id, source=source, agent=agent,
                            model=model, budget=budget, cooldown_s=cooldown_s,
                            started_at=started_at)
        return out["run_id"], out["token"]

    def register(self, **fields: Any) -> dict[str, Any]:
        """Register a run (admin token): {"run", "run_id", "token" (the agent's),
        "final_token" (sforge's, for the run's final submission only)}."""
        return self._call("POST", "/v1/runs",
                          json={k: v for k, v in fields.items() if v is not None})

    def runs(self) -> list[dict[str, Any]]:
        """Every registered run as the service reports it (admin)."""
        return self._call("GET", "/v1/runs")["runs"]

    def end_run(self, run_id: str) -> dict[str, Any]:
        """End a run: its token is revoked, what it submitted is still graded; returns the run."""
        return self._call("POST", f"/v1/runs/{run_id}/end")["run"]

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        """Revoke a run's token and drop its queued submissions; returns the run and the dropped."""
        return self._call("POST", f"/v1/runs/{run_id}/cancel")

    def history(self, run_id: str = "me") -> dict[str, Any]:
        """{"run", "submissions" (every round), "best"}; "me" = the run of a run token."""
        return self._call("GET", f"/v1/runs/{run_id}/history")

    def export(self, run_id: str) -> dict[str, Any]:
        """A run's full history with its archives' details, as stored beside the run (admin)."""
        return self._call("GET", f"/v1/runs/{run_id}/export")

    def submit(self, archive: bytes | str | Path, final: bool = False) -> dict[str, Any]:
        """Submit an archive (bytes or a path; run token). The submission, with its result
        when the same archive was graded before."""
        data = archive if isinstance(archive, bytes) else Path(archive).read_bytes()
        return self._call("POST", "/v1/submissions",
                          files={"archive": ("submission.tar.gz", data,
                                             "application/octet-stream")},
                          params={"final": "true"} if final else None)

    def result(self, sub_id: int, wait_s: float = 0) -> dict[str, Any]:
        """One submission; waits up to `wait_s` (the service caps it at 60) for a verdict."""
        return self._call("GET", f"/v1/submissions/{sub_id}",
                          params={"wait": wait_s} if wait_s else None)

    def wait(self, sub_id: int, timeout_s: float | None = None) -> dict[str, Any]:
        """The submission once graded (or cancelled); ServiceError 0 after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = 30.0 if deadline is None else min(30.0, deadline - time.monotonic())
            sub = self.result(sub_id, wait_s=max(0.0, left))
            if sub["state"] not in ("queued", "running"):
                return sub
            if deadline is not None and time.monotonic() >= deadline:
                raise ServiceError(0, f"submission {sub_id} not graded within {timeout_s} s")


    # games --------------------------------------------------------------------------
    def new_game(self) -> dict[str, Any]:
        """Start a game session (run token): its status and the game's opening "hello"."""
        return self._call("POST", "/v1/games")

    def step_raw(self, session: str, request: bytes) -> httpx.Response:
        """One step with the request's bytes as given; the response carries the game's
        reply bytes and the Sforge-Step / Sforge-Session-State / Sforge-Score headers."""
        return self._call("POST", f"/v1/games/{session}/step", raw=True, content=request,
                          headers={"Content-Type": "application/json"})

    def step(self, session: str, request: Any) -> Any:
        """One step: the game's reply, parsed."""
        return self.step_raw(session, json.dumps(request).encode()).json()

    def game(self, session: str = "current") -> dict[str, Any]:
        """The state of a game session (`current`: the caller's open one)."""
        return self._call("GET", f"/v1/games/{session}")

    def close_game(self, session: str = "current") -> dict[str, Any]:
        """End a game session now; its score so far is recorded; returns its final state."""
        return self._call("POST", f"/v1/games/{session}/close")

    def games(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Game sessions, all or only those of `run_id`."""
        return self._call("GET", "/v1/games",
                          params={"run": run_id} if run_id else None)["sessions"]

    def transcript(self, session: str) -> list[dict[str, Any]]:
        """The steps of a game session, one dict per JSON line, in order."""
        resp = self._call("GET", f"/v1/games/{session}/transcript", raw=True)
        # JSON lines end at "\n" only: a step may hold U+2028 and the like inside strings
        return [json.loads(line) for line in resp.content.split(b"\n") if line.strip()]


def _retry_after(resp: httpx.Response) -> float:
    try:
        return max(0.0, float(resp.headers.get("retry-after", "5")))
    except ValueError:
        return 5.0
