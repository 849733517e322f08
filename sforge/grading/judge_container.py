"""One judge container's life (create → extract → start → wait → read → remove) and what every
container from a judge image gets: its limits, lockdown, labels and the setup step that keeps
a planted result.json out."""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sforge.benchmark.model import Task
from sforge.containers import owner
from sforge.containers.engine import (
    ContainerEngine,
    ContainerFile,
    ContainerSpec,
    EngineError,
    ExtractConflict,
    ImageMissing,
    Mount,
)
from sforge.core.clock import now_iso
from sforge.core.errors import InfrastructureError
from sforge.core.fileio import open_regular
from sforge.core.units import parse_memory
from sforge.grading.archive import FilteredArchive
from sforge.grading.judge_log import LogWriter, write_log
from sforge.grading.result_json import parse_result
from sforge.grading.selection import under

log = logging.getLogger(__name__)

RESULT_DIR = "/opt/sforge"
RESULT_PATH = f"{RESULT_DIR}/result.json"
TASK_LABEL = "sforge.task"
KEY_LABEL = "sforge.key"  # the eval key: which result a container's run was for
MAX_RESULT_BYTES = 16 << 20
# Past the wall clock: time to create, extract, read back and remove before a sweep may kill.
DEADLINE_GRACE_S = 300
# What a grader running as root needs, and nothing more: hand files to an unprivileged user
# (CHOWN, FOWNER), read and clean whatever a submission left with odd modes (DAC_OVERRIDE),
# run submitted code as that user (SETUID, SETGID) and stop it (KILL). Dropped from Docker's
# defaults: MKNOD, NET_RAW, NET_BIND_SERVICE, SETPCAP, SETFCAP, FSETID, SYS_CHROOT, AUDIT_WRITE.
JUDGE_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")


@dataclass(frozen=True)
class ContainerLimits:
    """Per-container bounds: these defaults are the only ones; config.yaml's judge_limits
    overrides them (sforge.grading.contract.container_limits)."""

    pids: int = 4096  # processes + threads: a parallel build or a JVM test run fits
    writable: str | None = "10g"  # writable layer, where the storage driver can bound it


def lockdown(limits: ContainerLimits) -> dict[str, Any]:
    """ContainerSpec fields of every container from a judge image (judges, game servers)."""
    return {"no_new_privileges": True, "cap_add": JUDGE_CAPS, "pids": limits.pids}
# The setup step exits with this code if it cannot clear a planted result.json (then whatever
# is at RESULT_PATH was not written by the grader). A grader that itself exits 222 is judged
# invalid too: an accepted ambiguity, documented.
SETUP_FAILED_EXIT = 222

# The folders Docker puts on PATH by default: where sforge's own steps (clearing /opt/sforge
# before [judge] cmd, copying result.json out after it) look up rm, mkdir and head, never in
# the image's PATH, which may hold a folder the submission writes (cwd/bin,
# node_modules/.bin). [judge] cmd gets the image's PATH back.
DEFAULT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Where a judge's private out directory (a host directory only sforge reads) is mounted.
OUT_DIR = "/run/sforge-out"


def system_path(cwd: str) -> str:
    """PATH for sforge's own steps in a container whose submission lands in `cwd`: the
    default folders but those in cwd (with cwd "/", [submission] paths alone decide what
    lands where, and `sforge check` warns when they reach a PATH folder)."""
    cwd = posixpath.normpath(cwd)
    return ":".join(d for d in DEFAULT_PATH if cwd == "/" or not under(d, cwd))


def setup_script(cwd: str, copy_out: bool = False) -> str:
    """The shell step ("$1": [judge] cmd) every container of a judge image runs, after the
    submission is in place. Nothing the image or the submission planted at /opt/sforge (a
    result.json file, directory or symlink, or /opt/sforge itself as a symlink or file)
    survives it, so only what runs after it can write the result; it exits SETUP_FAILED_EXIT
    when it cannot clear one, or finds no rm, mkdir or head on system_path. Its variables
    are named sforge_* so that none of the image's environment is changed for [judge] cmd.

    With `copy_out`, the variant that hands result.json out through OUT_DIR: after [judge]
    cmd exits, what sits at RESULT_PATH is described in OUT_DIR/kind (file, symlink, dir,
    other, none) and, for a regular file, its first MAX_RESULT_BYTES + 1 bytes copied beside
    it; the judge's exit code is the container's, as with exec. The host reads that instead
    of asking the engine for the file (an archive round trip); whenever `kind` is missing or
    odd, it asks the engine after all."""
    path = system_path(cwd)
    clear = (
        f'sforge_path=$PATH; PATH={path}; sforge_dir={RESULT_DIR}; '
        '{ command -v rm && command -v mkdir && command -v head; } >/dev/null '
        f'|| {{ echo "sforge: the judge image has no rm, mkdir or head in {path}, which '
        f'sforge\'s setup step needs" >&2; exit {SETUP_FAILED_EXIT}; }}; '
        '{ { [ -d "$sforge_dir" ] && [ ! -L "$sforge_dir" ]; } || rm -rf "$sforge_dir"; } '
        '&& rm -rf "$sforge_dir/result.json" && mkdir -p "$sforge_dir" '
        '&& [ ! -e "$sforge_dir/result.json" ] '
        '|| { echo "sforge: cannot clear $sforge_dir/result.json" >&2; '
        f'exit {SETUP_FAILED_EXIT}; }}; '
    )
    if not copy_out:
        return clear + 'PATH=$sforge_path; exec /bin/sh -c "$1"'
    return clear + (
        'PATH=$sforge_path /bin/sh -c "$1"; sforge_rc=$?; '
        f'sforge_file=$sforge_dir/result.json; sforge_out={OUT_DIR}; '
        'if [ -L "$sforge_file" ]; then sforge_kind=symlink; '
        'elif [ -d "$sforge_file" ]; then sforge_kind=dir; '
        'elif [ -f "$sforge_file" ]; then sforge_kind=file; '
        f'head -c {MAX_RESULT_BYTES + 1} "$sforge_file" > "$sforge_out/result.json" '
        '|| sforge_kind=; elif [ -e "$sforge_file" ]; then sforge_kind=other; '
        'else sforge_kind=none; fi; '
        '[ -n "$sforge_kind" ] && echo "$sforge_kind" > "$sforge_out/kind"; exit $sforge_rc'
    )


def plain_number(value: float) -> str:
    """4.0 → '4', 0.5 → '0.5': how a person wrote it in task.toml."""
    return str(int(value)) if float(value).is_integer() else str(value)


class JudgeRun:
    """One container's life: create → extract → start → wait → read → (always) remove."""

    # Output read live by attaching before start (run). A subclass that starts its container
    # itself (the service's game servers) sets False: its log is read from the engine.
    LIVE_LOG = True

    def __init__(self, engine: ContainerEngine, image: str, task: Task,
                 timeout: float, log_path: Path | None, limits: ContainerLimits | None = None,
                 key: str = "", copy_out: bool = False):
        self.key = key
        self.limits = limits or ContainerLimits()
        # The out directory is a host directory the judge can write without bound: used only
        # where the engine does not bound the writable layer anyway (most daemons), so it
        # never opens a hole in a bound that holds.
        self.copy_out = copy_out and engine.shares_files and not (
            self.limits.writable and engine.bounds_writable)
        self.out: Path | None = None  # the private out directory, while the container lives
        self.engine = engine
        self.image = image
        self.task = task
        self.timeout = timeout
        self.log_path = log_path
        self.id: str | None = None
        self.log: LogWriter | None = None
        self.reader: threading.Thread | None = None
        self.read_error: BaseException | None = None

    def infra_error(self, what: str, exc: EngineError) -> InfrastructureError:
        """The engine's failure at `what` as Docker trouble naming the daemon and image."""
        daemon = self.engine.daemon
        if exc.unreachable:  # the message names the daemon already
            return InfrastructureError(f"{what} for judge image {self.image}: {exc}")
        return InfrastructureError(f"Docker daemon at {daemon}: {what} failed for judge "
                                   f"image {self.image}: {exc}")

    def spec(self, command: tuple[str, ...], **changes: Any) -> ContainerSpec:
        """The container of this judge image: the task's limits and cwd, the lockdown, the
        owner labels; `changes` for what a caller runs differently (a game server)."""
        judge, env = self.task.judge, self.task.environment
        fields: dict[str, Any] = {
            "image": self.image, "command": command, "cwd": env.cwd,
            "env": {"SFORGE_CPUS": plain_number(judge.cpus), "SFORGE_MEMORY": judge.memory},
            "labels": {**owner.labels(), TASK_LABEL: self.task.id},
            "cpus": judge.cpus, "memory": parse_memory(judge.memory),
            "network": "bridge" if judge.internet else "none", **lockdown(self.limits)}
        fields.update(changes)
        return ContainerSpec(**fields)

    def create_spec(self, spec: ContainerSpec, what: str = "creating the judge container"
                    ) -> None:
        """Create `spec`'s container; a missing image or an engine failure is Docker trouble."""
        try:
            self.id = self.engine.create_container(spec)
        except ImageMissing:
            raise InfrastructureError(f"judge image {self.image} not found on the Docker "
                                      f"daemon at {self.engine.daemon}; build it first") from None
        except EngineError as exc:
            raise self.infra_error(what, exc) from None

    def create(self) -> None:
        """Create the judge container: setup step, [judge] cmd, deadline label, out directory."""
        deadline = time.time() + self.timeout + DEADLINE_GRACE_S
        plain = setup_script(self.task.environment.cwd)
        setup, mounts = plain, tuple[Mount, ...]()
        if self.copy_out:
            self.out = owner.private_dir()  # 0700: ours alone; swept if we are killed
            setup = setup_script(self.task.environment.cwd, copy_out=True)
            mounts = (Mount(str(self.out), OUT_DIR, read_only=False),)
        spec = self.spec(("/bin/sh", "-c", setup, "sforge-judge", self.task.judge.cmd),
                         labels={**owner.labels(deadline=deadline), TASK_LABEL: self.task.id,
                                 KEY_LABEL: self.key},
                         writable=self.limits.writable, mounts=mounts)
        if not mounts:
            return self.create_spec(spec)
        try:
            self.create_spec(spec)
        except InfrastructureError as exc:
            # The daemon cannot bind this machine's directory (a socket forwarded from
            # another host, a desktop VM not sharing the temp dir): the archive API then.
            if "mount" not in str(exc).lower() and "bind" not in str(exc).lower():
                raise
            log.info("judge results through the engine's archive API: %s", exc)
            shutil.rmtree(self.out, ignore_errors=True)  # type: ignore[arg-type]
            self.out = None
            self.create_spec(dataclasses.replace(
                spec, command=("/bin/sh", "-c", plain, "sforge-judge", self.task.judge.cmd),
                mounts=()))
        return None

    def extract(self, filtered: FilteredArchive) -> str | None:
        """Put the filtered submission into cwd; a collision with the image is a verdict."""
        if not filtered.members:
            return None
        assert self.id is not None
        data: Any = filtered.read_bytes() if filtered.size <= (64 << 20) else filtered.data
        cwd = self.task.environment.cwd
        try:
            self.engine.put_archive(self.id, cwd, data)
        except ExtractConflict as exc:
            return f"could not extract the submission into {cwd}: {exc}"
        except EngineError as exc:
            raise self.infra_error("extracting the submission", exc) from None
        return None

    def attach(self) -> None:
        """Read the judge's output from before its first byte, in a thread, into the log."""
        if self.log_path is None:
            return
        assert self.id is not None
        try:
            stream = self.engine.attach_output(self.id)
        except EngineError as exc:
            raise self.infra_error("attaching to the judge", exc) from None
        self.log = LogWriter(self.log_path)

        def pump() -> None:
            try:
                for chunk in stream:
                    self.log.feed(chunk)  # type: ignore[union-attr]
            except BaseException as exc:  # noqa: BLE001 (reported after the run)
                self.read_error = exc

        self.reader = threading.Thread(target=pump, name="sforge-judge-log", daemon=True)
        self.reader.start()

    def run(self) -> tuple[bool, float, str, str]:
        """Start and wait up to the wall clock; kill at once on expiry. → timed_out, …"""
        assert self.id is not None
        started_at = now_iso("milliseconds")
        t0 = time.monotonic()
        try:
            self.attach()
            self.engine.start(self.id)
            # the clock runs from here: start-up is the engine's time
            timed_out = self.engine.wait(self.id, self.timeout) is None
            if timed_out:
                self.engine.kill(self.id)
        except EngineError as exc:
            raise self.infra_error("running the judge", exc) from None
        return timed_out, time.monotonic() - t0, started_at, now_iso("milliseconds")

    def inspect_state(self) -> dict[str, Any]:
        """The exited container's state (ExitCode, OOMKilled)."""
        assert self.id is not None
        try:
            return self.engine.container_state(self.id)
        except EngineError as exc:
            raise self.infra_error("inspecting the judge container", exc) from None

    def read_result(self) -> tuple[str | None, dict[str, Any], bool]:
        """→ (problem, fields, present). Reads RESULT_PATH from the exited container."""
        assert self.id is not None
        known, found = read_out(self.out) if self.out is not None else (False, None)
        try:
            if not known:
                found = self.engine.read_file(self.id, RESULT_PATH, MAX_RESULT_BYTES)
        except EngineError as exc:
            raise self.infra_error("reading result.json", exc) from None
        if found is None:
            return None, {}, False
        if found.kind == "dir":
            return "result.json is a directory, not a file", {}, True
        if found.kind == "symlink":
            return "result.json is a symlink, not a file", {}, True
        if found.kind == "too large":
            return f"result.json is larger than {MAX_RESULT_BYTES} bytes", {}, True
        if found.kind != "file":
            return "result.json is not a regular file", {}, True
        problem, fields = parse_result(found.data)
        return problem, fields, True

    def write_log(self, trailer: str) -> None:
        """Write the judge's log (when asked for) ending with sforge's `trailer` lines."""
        if self.log_path is None:
            return
        if self.log is None and not self.LIVE_LOG and self.id is not None:
            try:
                write_log(self.log_path, self.engine.output(self.id), trailer)
            except EngineError as exc:
                raise self.infra_error("reading the container's logs", exc) from None
            return
        if self.log is None:  # never started: only sforge's lines
            write_log(self.log_path, (), trailer)
            return
        if self.reader is not None:
            self.reader.join(timeout=30)
            if self.reader.is_alive():
                trailer = "\n[sforge] output still open 30 s after the judge ended: log cut here" \
                    + trailer
        if self.read_error is not None and not isinstance(self.read_error, EngineError):
            raise self.read_error
        writer, self.log = self.log, None
        writer.finish(trailer)

    def remove(self) -> None:
        """Remove the container and its out directory; a failure is logged, never raised."""
        if self.log is not None:
            self.log.discard()
        if self.out is not None:
            shutil.rmtree(self.out, ignore_errors=True)
            self.out = None
        if self.id is None:
            return
        try:
            self.engine.remove_container(self.id)
        except EngineError as exc:  # never mask the real outcome; the sweep removes it later
            log.warning("could not remove judge container %s: %s", self.id[:12], exc)


def read_out(out: Path) -> tuple[bool, ContainerFile | None]:
    """What the judge's setup step left in its out directory → (known, file). Not known
    (marker missing, unreadable, or anything but the regular files the step writes): the
    caller asks the engine for result.json instead, so an odd directory never decides."""
    kind = _read_regular(out / "kind", 16)
    if kind is None:
        return False, None
    name = kind.decode(errors="replace").strip()
    if name == "none":
        return True, None
    if name in ("symlink", "dir", "other"):
        return True, ContainerFile(name)
    if name != "file":
        return False, None
    data = _read_regular(out / "result.json", MAX_RESULT_BYTES + 1)
    if data is None:
        return False, None
    return True, ContainerFile("too large") if len(data) > MAX_RESULT_BYTES \
        else ContainerFile("file", data)


def _read_regular(path: Path, cap: int) -> bytes | None:
    """Up to `cap` bytes of a regular file, never through a symlink; None otherwise."""
    try:
        fd, _ = open_regular(path, follow=False)
    except OSError:
        return None
    try:
        chunks, left = [], cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
