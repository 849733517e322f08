"""Container calls of the Docker engine over its HTTP API (sforge.containers.http): create,
extract, attach, exec, start, wait, kill, read back, remove; no Docker SDK import."""

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
from collections.abc import Iterator
from typing import IO, Any

from sforge.containers import http as engine_http
from sforge.containers.engine import (
    ContainerFile,
    ContainerSpec,
    EngineError,
    ExtractConflict,
    ImageMissing,
)
from sforge.containers.owner import process_start
from sforge.core.fileio import read_strings, remember_string, user_cache

log = logging.getLogger(__name__)


class DockerContainers:
    """The container half of DockerEngine: every call over `http`, the daemon's transport."""

    @property
    def http(self) -> engine_http.HttpTransport:
        """The daemon's transport: DockerEngine makes it, once."""
        raise NotImplementedError

    @property
    def daemon(self) -> str:
        """Where the daemon is, for messages: its socket path or URL."""
        return self.http.daemon

    def info(self) -> dict[str, Any]:
        """The daemon's /info record (Name, ServerVersion, DockerRootDir, …)."""
        try:
            return dict(self.api_json("GET", "/info"))
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    @property
    def shares_files(self) -> bool:
        """True over a Unix socket (a local daemon sees this machine's paths), False over TCP."""
        return self.http.socket_path is not None

    @property
    def bounds_writable(self) -> bool:
        """Whether the daemon's storage driver accepted a size bound on a writable layer so far."""
        return self._storage_opt_supported()

    def api_json(self, method: str, path: str, params: dict[str, Any] | None = None,
                 body: Any = None, timeout: float | None = 600) -> Any:
        """One API call's JSON answer; an unreachable daemon or a timeout is EngineError."""
        try:
            return self.http.json(method, path, params, body, timeout)
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None
        except engine_http.CallTimeout as exc:
            raise EngineError(str(exc)) from None

    def api_stream(self, method: str, path: str, params: dict[str, Any] | None = None,
                   timeout: float | None = 600) -> engine_http.Response:
        """One API call's streamed answer (HttpError for a non-2xx status)."""
        try:
            return self.http.request(method, path, params, headers={"Content-Length": "0"}
                                     if method == "POST" else None, timeout=timeout)
        except engine_http.Unreachable as exc:
            raise EngineError(str(exc), unreachable=True) from None
        except engine_http.CallTimeout as exc:
            raise EngineError(str(exc)) from None

    def create_container(self, spec: ContainerSpec) -> str:
        """Create (not start) a container from `spec`; → its id. Raises ImageMissing."""
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
                return str(self.api_json("POST", "/containers/create",
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
        """Extract a tar at `path` (made when missing); ExtractConflict on a clash, including
        a member that would put a non-folder where the container has a folder."""
        def put(where: str, payload: bytes | IO[bytes]) -> None:
            size = len(payload) if isinstance(payload, bytes) else _remaining(payload)
            try:
                # never a non-folder over a folder of the image (nor the reverse): a member
                # `tests` (a link, a file) would replace the grader's tests/ whole
                self.http.request("PUT", f"/containers/{engine_http.quoted(cid)}/archive",
                                  {"path": where, "noOverwriteDirNonDir": "1"}, payload,
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
        """stdout+stderr of the container from its first byte: call it before `start`."""
        try:  # attached now, before the caller starts the container
            answer = self.api_stream("POST", f"/containers/{engine_http.quoted(cid)}/attach",
                                     {"stream": 1, "stdout": 1, "stderr": 1, "logs": 0},
                                     timeout=None)  # open as long as the judge runs
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return frames(answer)

    def exec_start(self, cid, command, env=None, workdir=None, timeout=None):
        """Run `command` in the running container; → (exec id, its demultiplexed output)."""
        body = {"Cmd": list(command), "AttachStdout": True, "AttachStderr": True,
                "Env": None if env is None else [f"{k}={v}" for k, v in env.items()],
                "WorkingDir": workdir or ""}
        try:
            eid = str(self.api_json("POST", f"/containers/{engine_http.quoted(cid)}/exec", None,
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
        return eid, frames(answer)

    def exec_state(self, eid: str) -> dict[str, Any]:
        """The exec's record (Running, ExitCode); EngineError when the daemon refuses."""
        try:
            return dict(self.api_json("GET", f"/exec/{engine_http.quoted(eid)}/json"))
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def start(self, cid: str) -> None:
        """Start a created container; EngineError when the daemon refuses."""
        try:
            self.api_json("POST", f"/containers/{engine_http.quoted(cid)}/start")
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def wait(self, cid: str, timeout: float) -> int | None:
        """The exit code, or None when `timeout` passed first (a lost daemon is EngineError)."""
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
        """SIGKILL the container; nothing when it already exited."""
        with contextlib.suppress(engine_http.HttpError):  # 409: it just exited
            self.api_json("POST", f"/containers/{engine_http.quoted(cid)}/kill")

    def container_state(self, cid: str) -> dict[str, Any]:
        """The container's State record (ExitCode, OOMKilled, …); EngineError when refused."""
        try:
            found = self.api_json("GET", f"/containers/{engine_http.quoted(cid)}/json")
            return dict(found["State"])
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None

    def read_file(self, cid: str, path: str, cap: int) -> ContainerFile | None:
        """What is at `path` (None: nothing); a regular file's bytes, "too large" beyond `cap`."""
        try:
            answer = self.api_stream("GET", f"/containers/{engine_http.quoted(cid)}/archive",
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
        """The container's filesystem as an uncompressed tar stream (nothing runs in it)."""
        try:
            answer = self.api_stream("GET", f"/containers/{engine_http.quoted(cid)}/export",
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
        """The output the daemon kept in its json-file log (ContainerSpec.keep_output)."""
        try:
            answer = self.api_stream("GET", f"/containers/{engine_http.quoted(cid)}/logs",
                                     {"stdout": 1, "stderr": 1, "follow": 0})
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return frames(answer)

    def remove_container(self, cid: str) -> bool:
        """Force-remove; False when it is already gone or another caller is removing it."""
        try:
            self.api_json("DELETE", f"/containers/{engine_http.quoted(cid)}", {"force": 1})
            return True
        except engine_http.HttpError as exc:
            if exc.status in (404, 409):  # gone, or "removal … already in progress"
                return False
            raise EngineError(exc.message) from None

    def containers(self, *labels: str) -> list[tuple[str, dict[str, str]]]:
        """(id, labels) of every container, running or not, that carries all `labels`."""
        try:
            found = self.api_json("GET", "/containers/json", {
                   "all": 1, "filters": json.dumps({"label": list(labels)})})
        except engine_http.HttpError as exc:
            raise EngineError(exc.message) from None
        return [(c["Id"], c.get("Labels") or {}) for c in found]


def _remaining(fh: IO[bytes]) -> int:
    here = fh.tell()
    end = fh.seek(0, 2)
    fh.seek(here)
    return end - here


def frames(answer: engine_http.Response) -> Iterator[bytes]:
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
