"""Errors that reach the user: each says where (file, field) and what was expected."""

from __future__ import annotations

from pathlib import Path


class SforgeError(Exception):
    """An error with a message fit for the terminal; the CLI prints it and exits non-zero."""


class DefinitionError(SforgeError):
    """Bad benchmark or task definition: names the file, the field and what is expected."""

    def __init__(self, path: Path | str, field: str | None, message: str, task: str | None = None,
                 line: int | None = None):
        self.path = Path(path)
        self.field = field
        self.message = message
        self.task = task
        self.line = line  # 1-based, when the fault is known to lie on one line of `path`
        where = f"{path}" + (f": [{field}]" if field else "")
        super().__init__(f"{where}: {message}")


class NotUtf8(SforgeError):
    """A file read as text that is not UTF-8: names the file, the first bad byte, its offset
    and its line, in one line (never a UnicodeDecodeError traceback)."""

    def __init__(self, path: Path | str, data: bytes, exc: UnicodeDecodeError):
        self.path = Path(path)
        self.offset = exc.start
        self.line = data.count(b"\n", 0, exc.start) + 1
        self.reason = (f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
                       f"line {self.line})")
        super().__init__(f"{path}: {self.reason}")


class UsageError(SforgeError):
    """A command line that cannot be run as given (an option's value out of range, a needed
    option missing): fix the command, not the files it names."""


class InfrastructureError(SforgeError):
    """Docker daemon, registry or disk trouble: never a verdict, never a result file."""


class BuildFailed(SforgeError):
    """A Dockerfile failed or was refused (a task problem, not infrastructure). The engine
    raises it with Docker's message; the build adds the image, the tail of its log and
    where the whole log is."""

    def __init__(self, message: str, *, label: str | None = None, log: Path | None = None,
                 tail: list[str] | None = None):
        self.reason, self.log, self.tail = message, log, tail or []
        text = f"{label}: {message}" if label else message
        if self.tail:
            text += "\n    " + "\n    ".join(self.tail)
        if log:
            text += f"\n  full log: {log}"
        super().__init__(text)
