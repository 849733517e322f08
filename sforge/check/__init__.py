"""`sforge check`: lint a benchmark directory against the task rules a program can check.

The rules are those of a benchmark's tasks/SCHEMA.md (EdgeBench's is the reference):
pinned images and packages, build contexts, size caps and blobs, required metadata and
NOTES.md, plus every task-definition error the loader reports. Each finding names a file
and, where one applies, the line. Nothing here needs Docker; git is used, when the
benchmark is inside a work tree, only to ask which paths are ignored.

Modules: findings, toml_positions (lines of TOML fields), pinning, context and tasks (the
rules; `check_benchmark`). The Dockerfile parser they share with the build is
sforge.benchmark.dockerfile.
"""

from sforge.benchmark.dockerfile import (
    Instruction,
    parse_dockerfile,
    simple_commands,
    tokenize_shell,
)
from sforge.check.findings import Finding, format_findings, has_errors
from sforge.check.tasks import CheckContext, check_benchmark, check_dockerfile
from sforge.check.toml_positions import toml_lines

__all__ = ["Finding", "Instruction", "CheckContext", "check_benchmark", "check_dockerfile",
           "format_findings", "has_errors", "parse_dockerfile", "simple_commands",
           "tokenize_shell", "toml_lines"]
