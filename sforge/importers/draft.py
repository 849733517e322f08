"""The format-neutral picture of one source task, and the checks of whether it fits sforge."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Where tests may read without that being "outside the submission": their own files, logs,
# scratch space, the system's programs and libraries.
_HARMLESS = ("/tests", "/logs", "/tmp", "/dev", "/proc/self", "/usr", "/bin", "/sbin", "/lib",
             "/lib64", "/opt/sforge", "/root/.local", "/root/.cache", "/var/lib/apt",
             "/var/cache", "/etc/os-release", "/etc/ssl")
_ABS_PATH = re.compile(r"""(?:^|(?<=[\s"'=(,\[{]))(/[A-Za-z0-9_.+@-]+(?:/[A-Za-z0-9_.+@-]*)*)""")
_SYSTEM_STATE = [
    (re.compile(r"\bdpkg\b|\bapt(?:-get)? list\b|\brpm -q|\bpip3? (?:show|list|freeze)\b|"
                r"importlib\.metadata|pkg_resources"), "checks installed packages"),
    (re.compile(r"\bsystemctl\b|\bservice \S+ status\b|\bpgrep\b|\bps (?:aux|-ef)\b|psutil|"
                r"\bnetstat\b|\bss -\w*l|(?:localhost|127\.0\.0\.1):\d+"),
     "checks services or processes"),
    (re.compile(r"/etc/(?:passwd|shadow|sudoers)|\buseradd\b|\bsudo\b|\bgetent\b"),
     "checks users"),
]
_NAMED = re.compile(r"""(?:getgrnam|getpwnam)\(\s*["']([\w.-]+)["']|\bid -[ugn]+ ([\w.-]+)|"""
                    r"""\bgetent (?:group|passwd) ([\w.-]+)""")
_NETWORK = re.compile(r"https?://(?!localhost|127\.0\.0\.1)[\w.-]+|\bcurl\b|\bwget\b|"
                      r"requests\.(?:get|post)\(|urllib\.request|\bgit clone\b|"
                      r"\b(?:pip3?|uv pip|npm|cargo|gem) install\b|\bapt(?:-get)? install\b|"
                      r"\buv (?:add|sync)\b|\buvx\b")
_TIMING = re.compile(r"\btime\.(?:time|perf_counter|monotonic)\(|\btimeit\b|/usr/bin/time\b|"
                     r"pytest\.mark\.timeout|\belapsed\b")
TEXT_SUFFIXES = {".py", ".sh", ".bash", ".txt", ".json", ".toml", ".yaml", ".yml", ".cfg",
                 ".ini", ".js", ".ts", ".go", ".rs", ".c", ".cpp", ".h", ""}


@dataclass
class Draft:
    """One source task as read, before anything is written."""
    fmt: str                      # harbor | terminal-bench
    source: Path
    task_id: str
    name: str
    instruction: str
    dockerfile: str               # environment Dockerfile text, as in the source
    env_files: list[tuple[Path, str]]  # (source file, path under environment/)
    tests: list[tuple[Path, str]]      # (source file, path under /tests)
    test_script: str              # the script the source runs to test, as text
    test_script_name: str         # its name under /tests
    solution: list[tuple[Path, str]]   # (source file, path under solution/)
    solve_cmd: str | None         # how the solution runs in the work container
    timeout_sec: float
    agent_timeout_sec: float | None = None
    cpus: float | None = None
    memory: str | None = None
    metadata: dict = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)  # for the judge (TEST_DIR, …)
    problems: list[str] = field(default_factory=list)  # why it does not fit
    notes: list[str] = field(default_factory=list)     # every change made
    cwd: str = "/"
    workdir: str | None = None    # the source's own setting, over the Dockerfile's WORKDIR


def dockerfile_workdir(text: str) -> str | None:
    """The last WORKDIR of the final stage (relative ones joined), or None."""
    workdir: str | None = None
    for line in _logical_lines(text):
        words = line.split(None, 1)
        if not words:
            continue
        kw = words[0].upper()
        if kw == "FROM":
            workdir = None
        elif kw == "WORKDIR" and len(words) > 1:
            value = words[1].strip().strip("'\"")
            workdir = str(PurePosixPath(workdir or "/") / value)
    return workdir


def dockerfile_from(text: str) -> str | None:
    """The image of a Dockerfile's first FROM, or None."""
    for line in _logical_lines(text):
        words = line.split()
        if words and words[0].upper() == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            return rest[0] if rest else None
    return None


def _logical_lines(text: str) -> list[str]:
    out, buf = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        out.append(buf + stripped)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _prefixed(src: str, prefix: str) -> str:
    if "://" in src or src.startswith("$"):
        return src
    norm = posixpath.normpath(src)
    return prefix if norm == "." else f"{prefix}/{norm}"


def rewrite_copy_sources(text: str, prefix: str) -> tuple[str, int]:
    """COPY/ADD sources made relative to the task directory (sforge's build context)."""
    count = 0
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\s*(?:COPY|ADD)\s+)((?:--\S+\s+)*)(.*)$", line, re.IGNORECASE)
        if not m or "--from" in m.group(2):
            out.append(line)
            continue
        rest = m.group(3).strip()
        if rest.startswith("["):  # JSON form
            try:
                args = json.loads(rest)
            except ValueError:
                out.append(line)
                continue
            if not isinstance(args, list) or len(args) < 2:
                out.append(line)
                continue
            new = json.dumps([*(_prefixed(a, prefix) for a in args[:-1]), args[-1]])
        else:
            args = rest.split()
            if len(args) < 2:
                out.append(line)
                continue
            new = " ".join([*(_prefixed(a, prefix) for a in args[:-1]), args[-1]])
        count += 1
        out.append(m.group(1) + m.group(2) + new)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), count


def split_installs(script: str) -> tuple[list[str], list[str], list[str]]:
    """A test script → (install commands for the judge build, the script without them,
    install commands that cannot move: inside a block, or reading the submission)."""
    moved, kept, stuck = [], [], []
    depth = 0
    install = re.compile(r"^\s*(?:sudo\s+)?(?:apt-get|apt)\s+(?:-\S+\s+)*(?:update|install)\b|"
                         r"^\s*(?:pip3?|python3? -m pip|uv pip)\s+install\b|"
                         r"^\s*curl\b.*\|\s*(?:ba)?sh\b|^\s*wget\b.*\|\s*(?:ba)?sh\b|"
                         r"^\s*(?:source|\.)\s+\$HOME/\.local/bin/env\b|"
                         r"^\s*uv\s+(?:init|add|venv|sync)\b|^\s*npm\s+(?:install|i)\b")
    for line in script.splitlines():
        stripped = line.strip()
        opens = re.match(r"^(if|for|while|until|case)\b", stripped) or stripped.endswith("{")
        closes = re.match(r"^(fi|done|esac|})\b", stripped)
        if install.search(line):
            reads_submission = re.search(r"(?:-r|-e|--requirement)\s+\S*|\s\.(?:\s|$)|\$PWD",
                                         stripped)
            if depth or reads_submission:
                stuck.append(stripped)
                kept.append(line)
            else:
                moved.append(stripped)
            continue
        if opens and not closes:
            depth += 1
        elif closes and depth:
            depth -= 1
        kept.append(line)
    return moved, kept, stuck


def _texts(files: list[tuple[Path, str]]) -> list[tuple[str, str]]:
    out = []
    for src, rel in files:
        if src.suffix.lower() in TEXT_SUFFIXES and src.stat().st_size < (1 << 20):
            out.append((rel, src.read_text(errors="replace")))
    return out


def analyse(draft: Draft, test_text: str) -> list[str]:
    """Fit checks over the test script (installs already moved out) and the test files.
    Returns the submission paths the tests read (relative to cwd); adds problems/notes."""
    texts = [(draft.test_script_name, test_text), *_texts(draft.tests)]
    cwd = draft.cwd.rstrip("/") or "/"
    image_text = draft.dockerfile
    paths: set[str] = set()
    outside: set[str] = set()
    from_image: set[str] = set()
    for _, text in texts:
        for p in _ABS_PATH.findall(text):
            p = p.rstrip("/") or "/"
            if cwd != "/" and (p == cwd or p.startswith(cwd + "/")):
                paths.add(p[len(cwd) + 1:] or ".")
            elif any(p == h or p.startswith(h + "/") for h in _HARMLESS):
                continue
            elif p in image_text:
                from_image.add(p)
            else:
                outside.add(p)
    if outside:
        draft.problems.append("tests read absolute paths outside the submission: "
                              + ", ".join(sorted(outside)[:8]))
    if from_image:
        draft.notes.append("tests also read " + ", ".join(sorted(from_image)[:8]) + ", which "
                           "the environment Dockerfile puts in the image: the judge reads the "
                           "image's copy, so changes an agent makes there are not graded")
    created = set(re.findall(r"\b(?:groupadd|useradd|addgroup|adduser)\b[^\n]*?([\w.-]+)\s*$",
                             image_text, re.MULTILINE))
    created |= set(re.findall(r"\b(?:groupadd|useradd|addgroup|adduser)\b(?:\s+-\S+(?:\s+\d+)?)*"
                              r"\s+([\w.-]+)", image_text))
    for _, text in texts:
        for pattern, what in _SYSTEM_STATE:
            hit = pattern.search(text)
            if hit:
                draft.problems.append(f"tests check system state ({what}: {hit.group(0)!r})")
        for names in _NAMED.findall(text):
            name = next(n for n in names if n)
            if name not in created:
                draft.problems.append(f"tests check system state (user or group {name!r}, "
                                      "which the environment does not create)")
        hit = _NETWORK.search(text)
        if hit:
            draft.problems.append(f"tests need the network ({hit.group(0)!r})")
        hit = _TIMING.search(text)
        if hit:
            draft.problems.append(f"tests time themselves ({hit.group(0)!r}): the verdict "
                                  "would depend on machine load")
    draft.problems[:] = list(dict.fromkeys(draft.problems))
    if "." in paths or not paths:
        return ["."]
    tops = sorted(paths)
    return [p for p in tops if not any(p.startswith(q + "/") for q in tops if q != p)]


def task_id_for(name: str) -> str:
    """A directory name made a valid sforge task id (it becomes part of image names)."""
    tid = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("._-")
    tid = re.sub(r"[._-]{2,}", "-", tid)
    return tid or "task"
