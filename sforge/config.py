"""config.yaml, validated against config.schema.yaml, with CLI and environment overrides."""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import SforgeError
from .model import DEFAULT_BENCHMARK

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULTS: dict[str, Any] = {
    "benchmark": DEFAULT_BENCHMARK,
    "results": "results",
    "submissions": None,
    "tasks": None,
    "registry": None,
    "push": False,
    "verify_images": True,
    "force": False,
    "archive_limits": {"max_members": 10_000, "max_bytes": 1 << 30},
    "judge_limits": {"pids": 4096, "writable": "10g"},
    "budgets_hours": [2, 4, 6, 8, 10, 12],
    "service": {},  # see SERVICE_DEFAULTS
    "run_timeout_s": 3600,
    "games": {},  # see GAMES_DEFAULTS
}
SERVICE_DEFAULTS: dict[str, Any] = {
    "max_concurrent": None, "max_pending": 200, "max_upload_bytes": 100 << 20,
    "budget": None, "cooldown_s": 0.0, "drain_s": 60.0,
}


# Game sessions of the judge service (sforge.service.games): every limit is a clear HTTP
# error when passed (429/409/410/503), never a silent eviction.
GAMES_DEFAULTS: dict[str, Any] = {
    "max_sessions_per_run": 5, "max_open_per_run": 1, "max_open": 8,
    "idle_timeout_s": 600.0, "max_session_s": 3600.0, "steps_per_s": 50.0,
    "start_timeout_s": 60.0, "step_timeout_s": 30.0, "max_step_bytes": 65536,
}


def games_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The games section with its defaults filled in."""
    return {**GAMES_DEFAULTS, **(config.get("games") or {})}


def service_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The service section with its defaults filled in (config.yaml may set only some)."""
    return {**SERVICE_DEFAULTS, **(config.get("service") or {})}


@functools.cache
def schema() -> dict[str, Any]:
    return yaml.safe_load(resources.files("sforge").joinpath("config.schema.yaml").read_text())


def validate(config: dict[str, Any], source: str = "config") -> None:
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(config))
    if errors:
        err = errors[0]
        field = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SforgeError(f"{source}: [{field}] {err.message}")


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Defaults < config.yaml < environment (SFORGE_BENCHMARK, SFORGE_REGISTRY) < overrides."""
    env = os.environ if env is None else env
    config = dict(DEFAULTS)
    if path is not None and path.is_file():
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise SforgeError(f"{path}: expected a mapping of settings")
        validate(data, str(path))
        config.update(data)
    if env.get("SFORGE_BENCHMARK"):
        config["benchmark"] = env["SFORGE_BENCHMARK"]
    if env.get("SFORGE_REGISTRY"):
        config["registry"] = env["SFORGE_REGISTRY"]
    config.update({k: v for k, v in (overrides or {}).items() if v is not None})
    validate(config, "configuration")
    return config


def user_config(path: Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The configuration a command runs with: `path` (default: the repository's config.yaml),
    the environment and `overrides`; relative paths taken from the working directory."""
    config = load_config(path if path is not None else REPO_ROOT / "config.yaml", overrides)
    if config["benchmark"] == DEFAULT_BENCHMARK and not Path(DEFAULT_BENCHMARK).is_dir():
        config["benchmark"] = str(REPO_ROOT / DEFAULT_BENCHMARK)  # the bundled one
    # Relative paths mean the user's working directory, never the repository's.
    for key in ("benchmark", "results", "submissions"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    return config
