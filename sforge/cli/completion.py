"""`sforge completion bash|zsh`: the shell completion script, made by shtab from sforge's own
parser (every command and option, run commands included), so it never drifts from --help."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from sforge.cli.common import Subcommands, add_command

SHELLS = ("bash", "zsh")


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of `parser` for `shell`."""
    import shtab  # function-level: only this command loads shtab (start-up time)

    return str(shtab.complete(parser, shell=shell))


def add_completion(sub: Subcommands, full_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """`sforge completion`'s parser; `full_parser` makes sforge's whole parser (with the run
    commands' options), from which the script is made."""

    def cmd_completion(args: argparse.Namespace) -> int:
        print(completion_script(full_parser(), args.shell))
        return 0

    p = add_command(
        sub, "completion", cmd_completion, "print the shell completion script (bash, zsh)",
        "Print a completion script for sforge's commands and options. Load it in the\n"
        "current shell with eval, or save it where the shell looks for completions.",
        examples=['eval "$(sforge completion bash)"          # this bash session',
                  "sforge completion bash > ~/.local/share/bash-completion/completions/sforge",
                  "sforge completion zsh > ~/.zfunc/_sforge  # with fpath+=(~/.zfunc)"])
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(sweep=False)
