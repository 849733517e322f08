"""The Docker implementation of ContainerEngine: the only module, with its HTTP transport
(sforge.containers.http), that speaks Docker's API and imports the docker SDK (a test checks).
Docker's errors become InfrastructureError (EngineError for container calls) naming the image."""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import logging
import socket
import struct
import tarfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sforge.containers import http as engine_http
from sforge.containers.engine import (
    ContainerEngine,
    ContainerFile,
    ContainerSpec,
    EngineError,
    ExtractConflict,
    ImageMissing,
    RegistryError,
)
from sforge.containers.owner import process_start
from sforge.core.errors import BuildFailed, InfrastructureError
from sforge.core.fileio import read_strings, remember_string, user_cache

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


def _reference_pattern(tag: str) -> str:
    """A `reference` filter matching `tag`: <name>.* for sforge's <name>.<kind>.<id> tags
    (one pattern for a whole benchmark), else the tag's repository itself."""
    repo = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    head = repo.split(".", 1)[0]
    return f"{head}.*" if "." in repo and "/" not in repo and head else repo


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
            return list(self._call("GET", "/images/json", params))
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
            return dict(self._call("GET", f"/images/{engine_http.quoted(ref)}/json"))
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

    # -- containers (and image lookups): over engine_http, no SDK import ---------------------
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

    @property
    def daemon(self) -> str:
        return self.http.daemon

    def info(self) -> dict[str, Any]:
        try:
            return dict(self._call("GET", "/info"))
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    @property
    def shares_files(self) -> bool:
        return self.http.socket_path is not None

    @property
    def bounds_writable(self) -> bool:
        return self._storage_opt_supported()

    def _call(self, method: str, path: str, params: dict[str, Any] | None = None,
              body: Any = None, timeout: float | None = 600) -> Any:
        try:
            return self.http.json(method, path, params, body, timeout)
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None
        except engine_http.CallTimeout as exc:
            raise EngineError(str(exc)) from None

    def _stream(self, method: str, path: str, params: dict[str, Any] | None = None,
                timeout: float | None = 600) -> engine_http.Response:
        try:
            return self.http.request(method, path, params, headers={"Content-Length": "0"}
                                     if method == "POST" else None, timeout=timeout)
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None
        except engine_http.CallTimeout as exc:
            raise EngineError(str(exc)) from None

    def create_container(self, spec: ContainerSpec) -> str:
        writable = spec.writable if self._storage_opt_supported() else None
        body: dict[str, Any] = {
            "Image": spec.image, "Entrypoint": list(spec.command), "Cmd": None,
            "WorkingDir": spec.cwd, "Env": [f"{k}={v}" for k, v in spec.env.items()],
            "Labels": dict(spec.labels), "Tty": False, "OpenStdin": spec.stdin,
            "StdinOnce": spec.stdin, "AttachStdin": spec.stdin,
            "AttachStdout": spec.stdin, "AttachStderr": spec.stdin}
        host: dict[str, Any] = {
            "Init": spec.init, "NetworkMode": spec.network,
            "NanoCpus": int(spec.cpus * 1e9), "Memory": spec.memory,
            "MemorySwap": spec.memory,  # equal: no swap on top of the limit
            "LogConfig": {"Type": "json-file", "Config": {"max-size": spec.log_max}}
            if spec.keep_output else {"Type": "none", "Config": {}},
            "CapDrop": ["ALL"] if spec.drop_caps else None, "CapAdd": list(spec.cap_add),
            "SecurityOpt": ["no-new-privileges"] if spec.no_new_privileges else None,
            "PidsLimit": spec.pids,
            "Mounts": [{"Type": "bind", "Source": m.source, "Target": m.target,
                        "ReadOnly": m.read_only} for m in spec.mounts] or None}
        while True:
            try:
                body["HostConfig"] = {**host, "StorageOpt": {"size": writable}} if writable \
                    else host
                return str(self._call("POST", "/containers/create",
                                      {"name": spec.name} if spec.name else None, body)["Id"])
            except engine_http.HttpError as exc:
                if exc.status == 404 and "image" in exc.message.lower():
                    raise ImageMissing(f"image {spec.image} not found on the Docker daemon at "
                                       f"{self.daemon}") from None
                text = exc.message.lower().replace(" ", "-")
                if writable and ("storage-opt" in text or "storageopt" in text):
                    self._storage_opt_unsupported()  # said once per daemon
                    log.info("the Docker daemon at %s cannot bound a container's writable "
                             "layer (%s); containers run without that bound", self.daemon,
                             exc.message)
                    writable = None
                    continue
                raise EngineError(exc.message) from None

    def _storage_opt_supported(self) -> bool:
        """False once this daemon refused to bound a writable layer: in this process, and for
        a local daemon in every later one while the same dockerd process runs (a new daemon,
        perhaps on other storage, is asked again)."""
        if self.daemon in _storage_opt_refused:
            return False
        instance = self._instance
        if instance is not None and instance in read_strings(user_cache(_REFUSING_DAEMONS)):
            _storage_opt_refused.add(self.daemon)
            return False
        return True

    def _storage_opt_unsupported(self) -> None:
        _storage_opt_refused.add(self.daemon)
        if self._instance is not None:  # unwritable: asked again next time
            remember_string(user_cache(_REFUSING_DAEMONS), self._instance, 16)

    @functools.cached_property
    def _instance(self) -> str | None:
        """Which dockerd process answers on a local socket (socket, pid, start time), or None
        (a TCP daemon, or one whose process this machine cannot see)."""
        path = self.http.socket_path
        if path is None:
            return None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(path)
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                        struct.calcsize("3i"))
        except OSError:
            return None
        pid = struct.unpack("3i", creds)[0]
        start = process_start(pid) if pid > 0 else None
        return f"{path} {pid} {start}" if start else None

    def put_archive(self, cid: str, path: str, data: bytes | IO[bytes]) -> None:
        def put(where: str, payload: bytes | IO[bytes]) -> None:
            size = len(payload) if isinstance(payload, bytes) else _remaining(payload)
            try:
                self.http.request("PUT", f"/containers/{engine_http.quoted(cid)}/archive",
                                  {"path": where}, payload,
                                  {"Content-Type": "application/x-tar",
                                   "Content-Length": str(size)}).read()
            except engine_http.Unreachable as exc:
                raise EngineError(str(exc), unreachable=True) from None
            except engine_http.CallTimeout as exc:
                raise EngineError(str(exc)) from None

        try:
            try:
                put(path, data)
            except engine_http.HttpError as exc:
                if exc.status != 404:
                    raise
                # path missing (Docker normally creates WorkingDir at create time): make it.
                put("/", _dirs_tar(path))
                if not isinstance(data, bytes):
                    data.seek(0)
                put(path, data)
        except engine_http.HttpError as exc:
            if any(s in exc.message.lower() for s in _EXTRACT_CONFLICTS):
                raise ExtractConflict(exc.message) from None
            raise EngineError(exc.message) from None

    def attach_output(self, cid: str) -> Iterator[bytes]:
        try:  # attached now, before the caller starts the container
            answer = self._stream("POST", f"/containers/{engine_http.quoted(cid)}/attach",
                                  {"stream": 1, "stdout": 1, "stderr": 1, "logs": 0},
                                  timeout=None)  # open as long as the judge runs
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return _frames(answer)

    def attach_stdio(self, cid: str) -> tuple[Any, socket.socket]:
        try:  # the game channel writes stdin over a hijacked socket: the SDK does that
            owner = self.client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1,
                                                               "stream": 1})
        except Exception as exc:  # docker-py raises several unrelated types here
            raise EngineError(str(getattr(exc, "explanation", None) or exc)) from None
        return owner, owner._sock

    def exec_start(self, cid, command, env=None, workdir=None, timeout=None):
        body = {"Cmd": list(command), "AttachStdout": True, "AttachStderr": True,
                "Env": None if env is None else [f"{k}={v}" for k, v in env.items()],
                "WorkingDir": workdir or ""}
        try:
            eid = str(self._call("POST", f"/containers/{engine_http.quoted(cid)}/exec", None,
                                 body)["Id"])
            data = json.dumps({"Detach": False, "Tty": False}).encode()
            answer = self.http.request("POST", f"/exec/{engine_http.quoted(eid)}/start", None,
                                       data, {"Content-Type": "application/json",
                                              "Content-Length": str(len(data))}, timeout)
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None
        except engine_http.CallTimeout as exc:
            raise EngineError(str(exc)) from None
        return eid, _frames(answer)

    def exec_state(self, eid: str) -> dict[str, Any]:
        try:
            return dict(self._call("GET", f"/exec/{engine_http.quoted(eid)}/json"))
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def start(self, cid: str) -> None:
        try:
            self._call("POST", f"/containers/{engine_http.quoted(cid)}/start")
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def wait(self, cid: str, timeout: float) -> int | None:
        try:
            answer = self.http.json("POST", f"/containers/{engine_http.quoted(cid)}/wait",
                                    timeout=max(timeout, 0.001))
        except engine_http.CallTimeout:
            return None
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None  # the daemon, not the clock
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return int(answer.get("StatusCode", -1))

    def kill(self, cid: str) -> None:
        with contextlib.suppress(engine_http.HttpError):  # 409: it just exited
            self._call("POST", f"/containers/{engine_http.quoted(cid)}/kill")

    def container_state(self, cid: str) -> dict[str, Any]:
        try:
            return dict(self._call("GET", f"/containers/{engine_http.quoted(cid)}/json")["State"])
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def read_file(self, cid: str, path: str, cap: int) -> ContainerFile | None:
        try:
            answer = self._stream("GET", f"/containers/{engine_http.quoted(cid)}/archive",
                                  {"path": path})
        except engine_http.HttpError as exc:
            if exc.status == 404:
                return None
            raise EngineError(exc.message) from None
        try:
            stat = json.loads(base64.b64decode(answer.headers.get(
                "x-docker-container-path-stat", "") or "e30="))
            mode = int(stat.get("mode", 0))
            if mode & _GO_DIR:
                return ContainerFile("dir")
            if mode & _GO_SYMLINK:
                return ContainerFile("symlink")
            if int(stat.get("size", 0)) > cap:
                return ContainerFile("too large")
            buf = bytearray()
            try:
                for chunk in answer.chunks():
                    buf += chunk
                    if len(buf) > cap + (1 << 20):
                        return ContainerFile("too large")
            except engine_http.Unreachable as exc:
                raise EngineError(str(exc), unreachable=True) from None
        finally:
            answer.close()
        with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
            member = tar.next()
            fh = tar.extractfile(member) if member is not None and member.isreg() else None
            if fh is None:
                return ContainerFile("other")
            return ContainerFile("file", fh.read())

    def export_filesystem(self, cid: str) -> Iterator[bytes]:
        try:
            answer = self._stream("GET", f"/containers/{engine_http.quoted(cid)}/export",
                                  timeout=None)
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        try:
            yield from answer.chunks()
        except (engine_http.Unreachable, engine_http.CallTimeout) as exc:
            raise EngineError(str(exc), unreachable=isinstance(exc, engine_http.Unreachable)
                              ) from None
        finally:
            answer.close()

    def output(self, cid: str) -> Iterator[bytes]:
        try:
            answer = self._stream("GET", f"/containers/{engine_http.quoted(cid)}/logs",
                                  {"stdout": 1, "stderr": 1, "follow": 0})
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return _frames(answer)

    def remove_container(self, cid: str) -> bool:
        try:
            self._call("DELETE", f"/containers/{engine_http.quoted(cid)}", {"force": 1})
            return True
        except engine_http.HttpError as exc:
            if exc.status in (404, 409):  # gone, or "removal … already in progress"
                return False
            raise EngineError(exc.message) from None

    def containers(self, *labels: str) -> list[tuple[str, dict[str, str]]]:
        try:
            found = self._call("GET", "/containers/json", {
                "all": 1, "filters": json.dumps({"label": list(labels)})})
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return [(c["Id"], c.get("Labels") or {}) for c in found]


def _remaining(fh: IO[bytes]) -> int:
    here = fh.tell()
    end = fh.seek(0, 2)
    fh.seek(here)
    return end - here


def _frames(answer: engine_http.Response) -> Iterator[bytes]:
    """The payloads of Docker's multiplexed stream (8-byte header: stream, size) in order,
    stdout and stderr alike; a broken stream raises EngineError."""
    buf = bytearray()
    try:
        for chunk in answer.chunks():
            buf += chunk
            while len(buf) >= 8:
                size = struct.unpack(">L", buf[4:8])[0]
                if len(buf) < 8 + size:
                    break
                payload = bytes(buf[8:8 + size])
                del buf[:8 + size]
                if payload:
                    yield payload
    except engine_http.Unreachable as exc:
        raise EngineError(str(exc), unreachable=True) from None
    except engine_http.CallTimeout as exc:
        raise EngineError(str(exc)) from None


# Docker's messages when an extracted member collides with the container's filesystem (a file
# where the archive has a directory, …).
_EXTRACT_CONFLICTS = ("not a directory", "is a directory", "file exists", "cannot overwrite",
                      "directory not empty", "file name too long")
# Up to this many tags, presence is asked tag by tag (each answer is small); more, one list.
_INSPECT_AT_MOST = 4
# Daemons (by address) found unable to bound a container's writable layer, in this process.
_storage_opt_refused: set[str] = set()
# Local dockerd processes (socket, pid, start time) that refused a writable bound.
_REFUSING_DAEMONS = "storage-opt-refused.json"
_GO_DIR = 1 << 31
_GO_SYMLINK = 1 << 27


def _dirs_tar(path: str) -> bytes:
    """A tar of the directories of an absolute path, to extract at '/'."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            info = tarfile.TarInfo("/".join(parts[:i]))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
    return buf.getvalue()


@functools.cache
def engine() -> DockerEngine:
    """The process's one engine, so its client and transport are made once."""
    return DockerEngine()
