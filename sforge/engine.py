"""The container engine sforge talks to: one interface, one Docker implementation.

Everything above this module speaks of tags and build contexts; only here do Docker's API
and its errors appear, turned into InfrastructureError with a message that names the image.
"""

from __future__ import annotations

import contextlib
import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import IO

from .errors import BuildFailed, InfrastructureError


class ContainerEngine(ABC):
    @abstractmethod
    def existing_tags(self, tags: Iterable[str]) -> set[str]:
        """Which of `tags` the daemon holds, in one call."""

    @abstractmethod
    def image_id(self, tag: str) -> str | None: ...

    @abstractmethod
    def tags_with_prefix(self, prefix: str) -> dict[str, int]:
        """Local tags whose repository starts with `prefix`, each with its image's size."""

    @abstractmethod
    def remove_tag(self, tag: str) -> None:
        """Untag (and delete, when it was the last tag) one image, by tag, never by id."""

    @abstractmethod
    def registry_has(self, remote: str) -> bool: ...

    def image_tags(self, ref: str) -> list[str]:
        """Every tag the engine holds for the image `ref` names (a name:tag, an id or a
        digest); [] when it holds no such image."""
        return []

    @abstractmethod
    def push(self, local: str, remote: str) -> None: ...

    @abstractmethod
    def pull(self, remote: str, local: str) -> None: ...

    @abstractmethod
    def build(self, context: IO[bytes], dockerfile: str, tag: str, buildargs: dict[str, str],
              platform: str | None, on_line: Callable[[str], None]) -> str:
        """Build from a tar context; return the image id. Raises BuildFailed."""


class RegistryError(InfrastructureError):
    """The registry refused or could not be reached; the message names the image."""


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


class DockerEngine(RegistryMixin, ContainerEngine):
    def __init__(self, client=None):
        self._client = client

    @functools.cached_property
    def client(self):
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
        try:
            images = self.client.api.images()
        except Exception as exc:
            raise InfrastructureError(f"cannot list images: {exc}") from None
        present = {t for img in images for t in (img.get("RepoTags") or [])}
        return wanted & present

    def tags_with_prefix(self, prefix: str) -> dict[str, int]:
        try:
            images = self.client.api.images()
        except Exception as exc:
            raise InfrastructureError(f"cannot list images: {exc}") from None
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

    def image_id(self, tag: str) -> str | None:
        import docker.errors

        try:
            return self.client.api.inspect_image(tag)["Id"]
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise InfrastructureError(f"cannot inspect image {tag}: {exc}") from None

    def image_tags(self, ref: str) -> list[str]:
        import docker.errors

        try:
            return list(self.client.api.inspect_image(ref).get("RepoTags") or [])
        except (docker.errors.ImageNotFound, docker.errors.NullResource):
            return []
        except docker.errors.APIError as exc:
            if getattr(exc, "status_code", None) in (400, 404):  # not a valid reference
                return []
            raise InfrastructureError(f"cannot inspect image {ref}: {exc}") from None

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
