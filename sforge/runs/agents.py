"""Agent definitions: agents/<name>/agent.toml (how to prepare the bundle on the host, the
command, the resume command, the env it needs, its model API). Data, no code: a new agent is
a new folder."""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sforge.core.config import package_data
from sforge.core.errors import DefinitionError, SforgeError
from sforge.core.fileio import read_utf8

AGENTS_DIR = package_data("agents")
MOUNT = "/opt/sforge/agent"  # where the bundle appears in the work container (read-only)


@dataclass(frozen=True)
class BundleItem:
    """One file of an agent's bundle and where it comes from (an npm package or a host file)."""
    to: str                    # path inside the bundle
    npm: str | None = None     # package@version, fetched with `npm pack` on the host
    member: str | None = None  # file inside the npm tarball
    host: str | None = None    # a host file (from a Debian package)
    debian: str | None = None  # the Debian package that ships `host` (for the error message)


@dataclass(frozen=True)
class ModelApi:
    """How an agent reaches its model API: the URL, key and the env variables that set them."""
    url: str
    key_env: str
    key_header: str
    base_url_env: str
    key_prefix: str = ""
    base_url_suffix: str = ""
    placeholder_env: str | None = None
    default_model: str | None = None


@dataclass(frozen=True)
class Agent:
    """An agent definition (agents/NAME/agent.toml), validated against agent.schema.yaml."""
    name: str
    path: Path
    description: str
    command: str
    resume: str | None = None
    version: str | None = None
    max_resumes: int = 0
    path_dirs: tuple[str, ...] = ()
    script: bool = False
    reference: bool = False  # the task's [reference] is copied into the container
    env: dict[str, str] = field(default_factory=dict)
    model_api: ModelApi | None = None
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    bundle: tuple[BundleItem, ...] = ()

    def model(self, given: str | None) -> str | None:
        """The model the agent runs: the one given, else its API's default (None: none)."""
        return given or (self.model_api.default_model if self.model_api else None)

    def price(self, model: str | None) -> dict[str, float] | None:
        """USD per million tokens (input, output) of `model`, or None when the agent knows none."""
        return self.prices.get(model or "")

    def api_key(self, env: dict[str, str] | None = None) -> str | None:
        """The key from the host's environment (the container only ever sees a placeholder)."""
        if self.model_api is None:
            return None
        return (os.environ if env is None else env).get(self.model_api.key_env) or None

    def require_key(self, model_api: str | None) -> None:
        """A run of this agent on its own API without the key could only fail every call:
        refuse it before it starts (another API given with --model-api may need none)."""
        if self.model_api and not model_api and not self.api_key():
            raise SforgeError(
                f"{self.model_api.key_env} is not set: agent {self.name} needs it for "
                f"{self.model_api.url} (export it, or point the agent at another API with "
                "--model-api URL)")


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = yaml.safe_load(resources.files("sforge").joinpath("agent.schema.yaml").read_text())
    return jsonschema.Draft202012Validator(schema)


def available() -> list[str]:
    """The names of the agents sforge ships, sorted."""
    return sorted(p.parent.name for p in AGENTS_DIR.glob("*/agent.toml"))


def load_agent(name: str, root: Path = AGENTS_DIR) -> Agent:
    """The agent `name` from `root`; DefinitionError naming the file and field when invalid."""
    path = root / name / "agent.toml"
    if not path.is_file():
        raise SforgeError(f"unknown agent {name!r}: no {path} "
                          f"(available: {', '.join(available()) or 'none'})")
    try:
        data: dict[str, Any] = tomllib.loads(read_utf8(path))
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(path, None, f"not valid TOML: {exc}") from None
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or None
        raise DefinitionError(path, where, err.message)
    api = data.get("model_api")
    return Agent(
        name=name, path=path, description=data["description"], command=data["command"],
        resume=data.get("resume"), version=data.get("version"),
        max_resumes=data.get("max_resumes", 0), path_dirs=tuple(data.get("path", [])),
        script=data.get("script", False), reference=data.get("reference", False),
        env=dict(data.get("env", {})),
        model_api=ModelApi(**api) if api else None, prices=data.get("prices", {}),
        bundle=tuple(BundleItem(**item) for item in data.get("bundle", [])),
    )
