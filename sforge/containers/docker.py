"""The Docker implementation of ContainerEngine: the only module, with its HTTP transport
(sforge.containers.http), that speaks Docker's API and imports the docker SDK (a test checks).
Docker's errors become InfrastructureError (EngineError for container calls) naming the image."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import socket
from collections.abc import Iterable
from typing import Any

from sforge.containers import http as engine_http
from sforge.containers.docker_containers import DockerContainers
from sforge.containers.engine import (
    ContainerEngine,
    EngineError,
    RegistryError,
)
from sforge.core.errors import BuildFailed, InfrastructureError

log = logging.getLogger(__name__)


def _registry_error(action: str, remote: str, exc: Exception) -> RegistryError:
    text = str(getattr(exc, "explanation", None) or exc)
    low = text.lower()
    if "unauthorized" in low or "authentication required" in low or "denied" in low:
        why = "unauthorized (log in with `docker login <registry>`)"
    elif "not found" in low or "manifest unknown" in low:
        why = "not found in the registry"
    elif any(s in low for s in ("connection refused", "no such host", "timeout", "dial tcp",
                                "could not resolve", "server gave http response")):
        why = "registry unreachable"
    else:
        why = "registry error"
    return RegistryError(f"{action} {remote}: {why}: {text.strip()}")


def _is_not_found(exc: Exception) -> bool:
    low = str(getattr(exc, "explanation", None) or exc).lower()
    return getattr(getattr(exc, "response", None), "status_code", None) == 404 or \
        "manifest unknown" in low or "not found" in low


class RegistryMixin:
    """Push, pull and manifest checks by the Docker daemon, with `docker login` credentials."""

    client: object

    def registry_has(self, remote: str) -> bool:
        """A manifest check (no pull). Raises RegistryError when the registry cannot answer."""
        import docker.errors

        try:
            self.client.api.inspect_distribution(remote)  # type: ignore[attr-defined]
            return True
        except docker.errors.APIError as exc:
            if _is_not_found(exc):
                return False
            raise _registry_error("checking", remote, exc) from None

    def push(self, local: str, remote: str) -> None:
        """Tag `local` as `remote`, push it, drop the extra tag; RegistryError when refused."""
        import docker.errors

        repo, tag = remote.rsplit(":", 1)
        api = self.client.api  # type: ignore[attr-defined]
        try:
            api.tag(local, repo, tag)
            for item in api.push(repo, tag, stream=True, decode=True):
                if "error" in item:
                    raise _registry_error("pushing", remote, Exception(item["error"]))
        except docker.errors.APIError as exc:
            raise _registry_error("pushing", remote, exc) from None
        finally:
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(remote, noprune=True)  # keep only the local name

    def pull(self, remote: str, local: str) -> None:
        """Pull `remote` and keep it only under the tag `local`; RegistryError when refused."""
        import docker.errors

        repo, tag = remote.rsplit(":", 1)
        lrepo, ltag = local.rsplit(":", 1)
        api = self.client.api  # type: ignore[attr-defined]
        try:
            for item in api.pull(repo, tag, stream=True, decode=True):
                if "error" in item:
                    raise _registry_error("pulling", remote, Exception(item["error"]))
            api.tag(remote, lrepo, ltag)
            api.remove_image(remote, noprune=True)
        except docker.errors.APIError as exc:
            raise _registry_error("pulling", remote, exc) from None


def _reference_pattern(tag: str) -> str:
    """A `reference` filter matching `tag`: <name>.* for sforge's <name>.<kind>.<id> tags
    (one pattern for a whole benchmark), else the tag's repository itself."""
    repo = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    head = repo.split(".", 1)[0]
    return f"{head}.*" if "." in repo and "/" not in repo and head else repo


class DockerEngine(RegistryMixin, DockerContainers, ContainerEngine):
    """The Docker daemon of DOCKER_HOST (or the given SDK client) as a ContainerEngine."""

    def __init__(self, client=None):
        self._client = client

    @functools.cached_property
    def client(self):
        """The Docker SDK client, made and pinged once; InfrastructureError without a daemon."""
        if self._client is not None:
            return self._client
        import docker  # imported late: `sforge list` and the Snakefile parse need no daemon

        try:
            client = docker.from_env(version="auto", timeout=600)
            client.ping()
        except Exception as exc:  # docker raises several unrelated types here
            raise InfrastructureError(
                f"cannot reach the Docker daemon ({exc}); is dockerd running and "
                "DOCKER_HOST right?") from None
        return client

    def existing_tags(self, tags: Iterable[str]) -> set[str]:
        wanted = set(tags)
        if not wanted:
            return set()
        if len(wanted) <= _INSPECT_AT_MOST:  # one eval's judge: not the daemon's whole list
            return {t for t in wanted if t in self.image_tags(t)}
        # Only the benchmark's images (one reference pattern for all its tags): the daemon
        # may hold thousands of others, and listing them doubled a no-op build.
        present = {t for img in self._images({"filters": json.dumps(
            {"reference": sorted({_reference_pattern(t) for t in wanted})})})
            for t in (img.get("RepoTags") or [])}
        return wanted & present

    def _images(self, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        try:
            return list(self.api_json("GET", "/images/json", params))
        except (engine_http.HttpError, EngineError) as exc:
            raise InfrastructureError(f"cannot list images: {exc}") from None

    def tags_with_prefix(self, prefix: str) -> dict[str, int]:
        images = self._images()
        return {t: int(img.get("Size") or 0) for img in images
                for t in (img.get("RepoTags") or []) if t.startswith(prefix)}

    def remove_tag(self, tag: str) -> None:
        import docker.errors

        try:
            self.client.api.remove_image(tag, noprune=False)
        except docker.errors.ImageNotFound:
            return
        except docker.errors.APIError as exc:  # e.g. a container still uses it
            raise InfrastructureError(f"cannot remove image {tag}: {exc}") from None

    def _inspect_image(self, ref: str) -> dict[str, Any] | None:
        """The image record, None when there is no such image (or `ref` names none)."""
        if not ref:
            return None
        try:
            return dict(self.api_json("GET", f"/images/{engine_http.quoted(ref)}/json"))
        except engine_http.HttpError as exc:
            if exc.status in (400, 404):  # no such image, or not a valid reference
                return None
            raise InfrastructureError(f"cannot inspect image {ref}: {exc}") from None
        except EngineError as exc:
            raise InfrastructureError(f"cannot inspect image {ref}: {exc}") from None

    def image_id(self, tag: str) -> str | None:
        found = self._inspect_image(tag)
        return None if found is None else str(found["Id"])

    def image_tags(self, ref: str) -> list[str]:
        found = self._inspect_image(ref)
        return [] if found is None else list(found.get("RepoTags") or [])

    def image_env(self, ref: str) -> list[str] | None:
        found = self._inspect_image(ref)
        return None if found is None else list((found.get("Config") or {}).get("Env") or [])

    def build(self, context, dockerfile, tag, buildargs, platform, on_line):
        import docker.errors

        kwargs = {"platform": platform} if platform else {}
        try:
            stream = self.client.api.build(fileobj=context, custom_context=True,
                                           dockerfile=dockerfile, tag=tag, buildargs=buildargs,
                                           rm=True, forcerm=True, decode=False, **kwargs)
            image_id = None
            error = None
            for chunk in stream:
                for raw in chunk.decode(errors="replace").splitlines():
                    if not raw.strip():
                        continue
                    try:
                        item = json.loads(raw)
                    except ValueError:
                        on_line(raw)
                        continue
                    if "stream" in item:
                        for line in item["stream"].splitlines():
                            on_line(line)
                    if "aux" in item and "ID" in item["aux"]:
                        image_id = item["aux"]["ID"]
                    if "error" in item:
                        error = item["error"].strip()
                        on_line(f"ERROR: {error}")
        except docker.errors.APIError as exc:
            raise InfrastructureError(f"building {tag}: Docker API error: {exc}") from None
        except OSError as exc:
            raise InfrastructureError(f"building {tag}: lost the Docker daemon: {exc}") from None
        if error:
            raise BuildFailed(error)
        return image_id or self.image_id(tag) or ""

    @functools.cached_property
    def http(self) -> engine_http.HttpTransport:
        try:
            transport = (engine_http.from_client(self._client) if self._client is not None
                         else engine_http.from_env())
        except OSError as exc:  # ssl.SSLError is one: DOCKER_CERT_PATH's files
            raise InfrastructureError(f"cannot use DOCKER_HOST's TLS settings "
                                      f"(DOCKER_CERT_PATH, DOCKER_TLS_VERIFY): {exc}") from None
        if transport is None:
            raise InfrastructureError(
                "sforge speaks to the Docker daemon over unix:// or tcp:// (DOCKER_HOST); "
                "for a daemon behind ssh, forward its socket: ssh -L /tmp/d.sock:"
                "/var/run/docker.sock HOST, then DOCKER_HOST=unix:///tmp/d.sock")
        return transport

    def attach_stdio(self, cid: str) -> tuple[Any, socket.socket]:
        try:  # the game channel writes stdin over a hijacked socket: the SDK does that
            owner = self.client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1,
                                                               "stream": 1})
        except Exception as exc:  # docker-py raises several unrelated types here
            raise EngineError(str(getattr(exc, "explanation", None) or exc)) from None
        return owner, owner._sock


# Up to this many tags, presence is asked tag by tag (each answer is small); more, one list.
_INSPECT_AT_MOST = 4


@functools.cache
def engine() -> DockerEngine:
    """The process's one engine, so its client and transport are made once."""
    return DockerEngine()
