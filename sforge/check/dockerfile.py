"""Dockerfile parsing: instructions with their lines, shell words of RUN, COPY/ADD arguments.

One parser for `sforge check` and for the build's refusal of a work Dockerfile that
reaches into judge/. Not a shell and not BuildKit: enough to find commands, their
arguments and the lines to name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..images import BASE_ARG, WORK_ARG  # noqa: F401 (the names every check module uses)


@dataclass
class Instruction:
    keyword: str                       # upper case
    line: int                          # line of the keyword
    pieces: list[tuple[int, str]]      # (line, text) of the arguments, continuations joined

    @property
    def text(self) -> str:
        return " ".join(t for _, t in self.pieces)


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with the physical line of every argument piece (backslash continuations,
    comment lines inside continuations dropped, as Docker does)."""
    out: list[Instruction] = []
    current: Instruction | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if current is None:
            if not stripped or stripped.startswith("#"):
                continue
            m = re.match(r"^\s*([A-Za-z]+)(\s+|$)(.*)$", raw)
            if not m:
                continue
            current = Instruction(m.group(1).upper(), no, [])
            body = m.group(3)
        else:
            if not stripped or stripped.startswith("#"):
                continue
            body = raw
        cont = body.rstrip().endswith("\\")
        if cont:
            body = body.rstrip()[:-1]
        current.pieces.append((no, body))
        if not cont:
            out.append(current)
            current = None
    if current is not None:
        out.append(current)
    return out


@dataclass
class Token:
    text: str
    line: int
    kind: str = "word"  # word | op | redir


_REDIR = re.compile(r"\d*(?:&>>?|>>|>&|<&|<<<|>\||>|<)(?:&?\d+-?|-)?")


def tokenize_shell(pieces: list[tuple[int, str]]) -> list[Token]:
    """Split shell text into words (quotes removed), operators and redirections, each with
    the line where it starts. Not a shell: enough to find commands and their arguments."""
    chars: list[tuple[str, int]] = []
    for i, (no, text) in enumerate(pieces):
        if i:
            chars.append((" ", no))
        chars.extend((c, no) for c in text)
    s = "".join(c for c, _ in chars)
    tokens: list[Token] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            if c == "\n":
                tokens.append(Token(";", chars[i][1], "op"))
            i += 1
            continue
        if s.startswith(("&&", "||"), i):
            tokens.append(Token(s[i:i + 2], chars[i][1], "op"))
            i += 2
            continue
        if c in ";|&()":
            tokens.append(Token(c, chars[i][1], "op"))
            i += 1
            continue
        m = _REDIR.match(s, i)
        if m:
            tokens.append(Token(m.group(0), chars[i][1], "redir"))
            i = m.end()
            continue
        if c == "#":  # a comment runs to the end of the text
            break
        start, word = i, []
        while i < n and s[i] not in " \t\r\n;|&()<>":
            ch = s[i]
            if ch == "\\" and i + 1 < n:
                word.append(s[i + 1])
                i += 2
            elif ch == "'":
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                word.append(s[i + 1:j])
                i = j + 1
            elif ch == '"':
                j = i + 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                word.append(s[i + 1:j].replace('\\"', '"'))
                i = j + 1
            elif s.startswith("$(", i) or ch == "`":
                close, j, level = (")", i + 2, 1) if ch == "$" else ("`", i + 1, 1)
                while j < n and level:
                    if close == ")" and s[j] == "(":
                        level += 1
                    elif s[j] == close:
                        level -= 1
                    j += 1
                word.append(s[i:j])
                i = j
            else:
                word.append(ch)
                i += 1
        tokens.append(Token("".join(word), chars[start][1]))
    return tokens


def simple_commands(tokens: list[Token]) -> Iterator[list[Token]]:
    """Words of each simple command, redirections and their targets dropped."""
    cmd: list[Token] = []
    skip_next = False
    for tok in tokens:
        if tok.kind == "op":
            if cmd:
                yield cmd
            cmd, skip_next = [], False
        elif tok.kind == "redir":
            skip_next = not re.search(r"&(\d+-?|-)$", tok.text)  # `2>&1` has no target
        elif skip_next:
            skip_next = False
        else:
            cmd.append(tok)
    if cmd:
        yield cmd


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = {"sudo", "env", "exec", "command", "time", "nice", "nohup", "eatmydata"}


def _strip_prefix(cmd: list[Token]) -> list[Token]:
    i = 0
    while i < len(cmd):
        word = cmd[i].text
        wrapper_option = word.startswith("-") and i and cmd[i - 1].text in ("sudo", "env", "nice")
        if _ASSIGN.match(word) or word in _WRAPPERS or wrapper_option:
            i += 1
        else:
            break
    return cmd[i:]


def _expand(word: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:  # ${NAME:-default} / ${NAME-default}
            return m.group(2)
        return m.group(0)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                  sub, word)



def _declarations(text: str, kw: str) -> Iterator[tuple[str, str | None]]:
    words = [t.text for t in tokenize_shell([(0, text)]) if t.kind == "word"]
    if kw == "ENV" and len(words) >= 2 and "=" not in words[0]:
        yield words[0], " ".join(words[1:])  # legacy `ENV NAME value`
        return
    for word in words:
        name, eq, value = word.partition("=")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            yield name, value if eq else None



def _run_script(ins: Instruction) -> list[tuple[int, str]]:
    text = ins.text.strip()
    if text.startswith("["):
        try:
            argv = json.loads(text)
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            if len(argv) >= 3 and PurePosixPath(argv[0]).name in ("sh", "bash") \
                    and argv[1] == "-c":
                return [(ins.line, argv[2])]
            return [(ins.line, " ".join(_shell_quote(a) for a in argv))]
    return _strip_run_flags(ins.pieces)


def _strip_run_flags(pieces: list[tuple[int, str]]) -> list[tuple[int, str]]:
    if not pieces:
        return pieces
    no, first = pieces[0]
    first = re.sub(r"^\s*(--[a-z-]+=\S+\s+)+", "", first)  # RUN --mount=... (BuildKit)
    return [(no, first), *pieces[1:]]


def _shell_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'" if re.search(r"[\s'\"$;&|<>]", word) else word




@dataclass
class CopyArgs:
    flags: list[str]     # --from=…, --chown=…, as written
    sources: list[str]   # context paths (or URLs for ADD), as written
    dest: str


def copy_args(ins: Instruction) -> CopyArgs | None:
    """The flags, sources and destination of a COPY or ADD, in shell form
    (`COPY a b /dst`) or JSON form (`COPY ["a", "b", "/dst"]`); None when malformed."""
    text = ins.text.strip()
    flags: list[str] = []
    while text.startswith("--"):
        flag, _, text = text.partition(" ")
        flags.append(flag)
        text = text.lstrip()
    words: list[str]
    if text.startswith("["):
        try:
            words = json.loads(text)
        except ValueError:
            return None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            return None
    else:
        words = text.split()
    if len(words) < 2:
        return None
    return CopyArgs(flags, words[:-1], words[-1])
