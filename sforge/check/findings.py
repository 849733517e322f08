"""What `sforge check` reports: one finding per rule violation, with file and line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class Finding:
    """One rule violation: the file, the line where one applies, the rule and the message."""
    file: Path
    line: int | None
    rule: str
    message: str
    severity: str = "error"  # "error" | "warning"

    def where(self) -> str:
        """'path:line', or the path alone when no line applies."""
        return f"{self.file}:{self.line}" if self.line is not None else f"{self.file}"

    def to_dict(self) -> dict[str, object]:
        """The finding as --json prints it (file as a string)."""
        return {"file": str(self.file), "line": self.line, "rule": self.rule,
                "message": self.message, "severity": self.severity}


def format_findings(findings: Iterable[Finding]) -> str:
    """One line per finding: 'path:line: rule: message' (warnings say so at the end)."""
    out = []
    for f in findings:
        tail = " (warning)" if f.severity == "warning" else ""
        out.append(f"{f.where()}: {f.rule}: {f.message}{tail}")
    return "\n".join(out)


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding is an error (warnings alone pass)."""
    return any(f.severity == "error" for f in findings)

