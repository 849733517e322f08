"""Dockerfile parsing: instructions with their lines, shell words of RUN, COPY/ADD arguments.

One parser for `sforge check` and for the build's refusal of a work Dockerfile that
reaches into judge/. Not a shell and not BuildKit: enough to find commands, their
arguments and the lines to name."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sforge.benchmark.images import BASE_ARG, WORK_ARG  # noqa: F401 (the names every check module uses)


@dataclass
class Heredoc:
    """A heredoc of a Dockerfile instruction: its delimiter, where it opens, its lines."""
    word: str                          # the delimiter, as in `<<EOT`
    line: int                          # line of the instruction that opens it
    body: list[tuple[int, str]]        # (line, text) of each body line


# `<<EOT`, `<<-EOT`, `<<"EOT"`, `<<'EOT'` in RUN, COPY or ADD (BuildKit's Dockerfile 1.4
# here-documents); `<<<` is a here-string, not one of them.
_HEREDOC = re.compile(r"(?<!<)<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2(?!<)")
HEREDOC_KEYWORDS = ("RUN", "COPY", "ADD")


@dataclass
class Instruction:
    """One Dockerfile instruction: its keyword and its argument pieces with their lines."""
    keyword: str                       # upper case
    line: int                          # line of the keyword
    pieces: list[tuple[int, str]]      # (line, text) of the arguments, continuations joined
    # here-documents (`RUN <<EOT` … `EOT`): their bodies, kept out of `pieces` so that the
    # instruction's own words stay what they are
    heredocs: list[Heredoc] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The arguments as one line (continuations joined by spaces)."""
        return " ".join(t for _, t in self.pieces)


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with the physical line of every argument piece (backslash continuations,
    comment lines inside continuations dropped, as Docker does); here-document bodies go to
    `heredocs`, never read as instructions."""
    out: list[Instruction] = []
    current: Instruction | None = None
    pending: list[tuple[bool, Heredoc]] = []   # open here-documents: (strip tabs, doc)
    for no, raw in enumerate(text.splitlines(), 1):
        if pending:
            strip_tabs, doc = pending[0]
            if (raw.lstrip("\t") if strip_tabs else raw).rstrip("\r") == doc.word:
                pending.pop(0)
                out[-1].heredocs.append(doc)
            else:
                doc.body.append((no, raw))
            continue
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
            if current.keyword in HEREDOC_KEYWORDS:
                pending = [(m.group(1) == "-", Heredoc(m.group(3), current.line, []))
                           for m in _HEREDOC.finditer(current.text)]
            current = None
    if current is not None:
        out.append(current)
    for _, doc in pending:   # unterminated: what there is
        out[-1].heredocs.append(doc)
    return out


@dataclass
class Token:
    """A shell word, operator or redirection, with the line where it starts."""
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


def strip_prefix(cmd: list[Token]) -> list[Token]:
    """The command without its leading assignments and wrappers (sudo, env, nice, …)."""
    i = 0
    while i < len(cmd):
        word = cmd[i].text
        wrapper_option = word.startswith("-") and i and cmd[i - 1].text in ("sudo", "env", "nice")
        if _ASSIGN.match(word) or word in _WRAPPERS or wrapper_option:
            i += 1
        else:
            break
    return cmd[i:]


def expand_word(word: str, variables: dict[str, str]) -> str:
    """`word` with $NAME and ${NAME} (and their :- defaults) expanded from `variables`."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:  # ${NAME:-default} / ${NAME-default}
            return m.group(2)
        return m.group(0)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                  sub, word)



def declarations(text: str, kw: str) -> Iterator[tuple[str, str | None]]:
    """(name, value or None) of each variable an ARG or ENV instruction declares."""
    words = [t.text for t in tokenize_shell([(0, text)]) if t.kind == "word"]
    if kw == "ENV" and len(words) >= 2 and "=" not in words[0]:
        yield words[0], " ".join(words[1:])  # legacy `ENV NAME value`
        return
    for word in words:
        name, eq, value = word.partition("=")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            yield name, value if eq else None



def run_script(ins: Instruction) -> list[tuple[int, str]]:
    """The shell text a RUN runs, with lines: its arguments, then the body of each of its
    here-documents, one command per line (`RUN <<EOT` runs the body as a script)."""
    words = _run_words(ins)
    scripts = [doc for doc in ins.heredocs if _is_shell_script(words, doc)]
    return words + [piece for doc in scripts for piece in _script_lines(doc)]


def _is_shell_script(words: list[tuple[int, str]], doc: Heredoc) -> bool:
    """Whether a shell runs the here-document's body: `RUN <<EOT` (no command before it; a
    `#!` line naming another interpreter aside) or `RUN bash <<EOT`; not `RUN python3 <<EOT`."""
    text = " ".join(t for _, t in words)
    m = _HEREDOC.search(text)
    before = text[:m.start()].split() if m else []
    if before:
        return PurePosixPath(before[-1]).name in ("sh", "bash", "dash")
    first = doc.body[0][1].strip() if doc.body else ""
    return not first.startswith("#!") or re.search(r"\b(ba|da)?sh\b", first) is not None


def _script_lines(doc: Heredoc) -> list[tuple[int, str]]:
    """A here-document's lines as tokenize_shell pieces: a line ends its command unless it
    ends with a backslash."""
    out = [(doc.line, ";")]
    for no, raw in doc.body:
        text = raw.rstrip()
        out.append((no, text[:-1]) if text.endswith("\\") else (no, text + " ;"))
    return out


def _run_words(ins: Instruction) -> list[tuple[int, str]]:
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
    """A COPY or ADD as written: its flags, its sources and its destination."""
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
    sources = [w for w in words[:-1] if not _HEREDOC.fullmatch(w)]  # inline files
    return CopyArgs(flags, sources, words[-1])


# ------------------------------------------------------------------------ here-documents
def heredoc_uses(path: Path) -> list[tuple[int, str]]:
    """(line, message) for each here-document in the Dockerfile at `path`: sforge builds
    through the Docker API's classic builder (docker.io 20.10 has no buildx, and the daemon's
    BuildKit frontend predates heredocs), which fails on them with "unknown instruction"."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [(ins.line, f"{ins.keyword} <<{doc.word}: here-documents need BuildKit's Dockerfile "
             "1.4 syntax; the classic builder sforge uses fails on them (\"unknown "
             "instruction\"): write the lines as `RUN a && b`, or COPY a script and RUN it")
            for ins in parse_dockerfile(text) for doc in ins.heredocs]


# ------------------------------------------------------------------ images a build reads
# <benchmark>.judge.<task id>[:tag][@digest], after any registry/path prefix: the judge
# image naming every sforge benchmark uses. Docker names are lower case; matched without
# regard to case so that a near miss is still caught.
JUDGE_IMAGE = re.compile(r"^(?:.*/)?[a-z0-9]+(?:[._-][a-z0-9]+)*\.judge\.[a-z0-9][a-z0-9._-]*"
                         r"(?::[\w][\w.-]*)?(?:@[a-z0-9]+:[0-9a-f]+)?$", re.IGNORECASE)


@dataclass
class ImageUse:
    """An image a build reads: the line, how it reads it, and the reference."""
    line: int
    how: str   # "FROM", "COPY --from", "RUN --mount from="
    ref: str   # as written, ARG defaults expanded


def _flag_values(text: str, flag: str) -> list[str]:
    """Values of `--flag=value` options at the start of an instruction's text."""
    out = []
    rest = text.strip()
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        name, _, value = word[2:].partition("=")
        if name == flag:
            out.append(value.strip("\"'"))
    return out


def image_uses(instructions: list[Instruction]) -> list[ImageUse]:
    """Every image a build reads besides its own stages: FROM, COPY/ADD --from and BuildKit's
    RUN --mount=…,from=…; ARG defaults (before the first FROM) expanded, `scratch` and stage
    names or indexes skipped. ${BASE_IMAGE} counts with its default, if it has one (sforge
    passes the base's tag only for tasks that name a base)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    seen_from = False
    uses: list[ImageUse] = []

    def use(line: int, how: str, raw: str) -> None:
        ref = expand_word(raw, args).strip()
        if not ref or "$" in ref or ref.lower() in stages or ref.isdigit() or ref == "scratch":
            return
        uses.append(ImageUse(line, how, ref))

    for ins in instructions:
        kw = ins.keyword
        if kw == "ARG" and not seen_from:
            for name, value in declarations(ins.text, kw):
                if value is not None:
                    args[name] = value
        elif kw == "FROM":
            seen_from = True
            words = [w for w in ins.text.split() if not w.startswith("--")]
            if words:
                use(ins.line, "FROM", words[0])
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
        elif kw in ("COPY", "ADD"):
            for value in _flag_values(ins.text, "from"):
                use(ins.line, f"{kw} --from", value)
        elif kw == "RUN":
            for mount in _flag_values(ins.text, "mount"):
                for option in mount.split(","):
                    key, _, value = option.partition("=")
                    if key.strip() == "from":
                        use(ins.line, "RUN --mount from=", value)
    return uses


def judge_image_uses(path: Path, resolve: Callable[[str], list[str]] | None = None
                     ) -> list[tuple[int, str]]:
    """(line, message) for each image the Dockerfile at `path` reads that is a judge image:
    by its name (any tag or digest), or, given `resolve` (a reference → the tags the Docker
    daemon holds for that image, [] when unknown), by a digest, an image id or another tag
    of a judge image."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for u in image_uses(parse_dockerfile(text)):
        if JUDGE_IMAGE.match(u.ref):
            found.append((u.line, f"{u.how} {u.ref}: names a judge image"))
            continue
        tags = [t for t in (resolve(u.ref) if resolve else []) if JUDGE_IMAGE.match(t)]
        if tags:
            found.append((u.line, f"{u.how} {u.ref}: is the judge image {tags[0]}"))
    return found
