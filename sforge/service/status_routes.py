"""The service's own endpoints: /health (no token) and /v1/metrics (admin)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import time
from typing import Any

from fastapi import FastAPI

from sforge import __version__
from sforge.service.core import Service


def add_status_routes(app: FastAPI, service: Service, admin_type: Any) -> None:
    """/health and /v1/metrics."""
    Admin: Any = admin_type  # an Annotated dependency type, made by the caller

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
                "capacity_cpus": service.capacity,
                "busy_cpus": service.scheduler.capacity.busy_cores,
                "capacity_mem_mb": service.memory_mb,
                "busy_mem_mb": service.scheduler.capacity.busy_mem_mb,
                "max_pending": service.limits.max_pending,
                "mean_judge_s": round(service.scheduler.mean_duration(), 3),
                "uptime_s": round(time.time() - service.started, 1),
                "draining": service.draining}
