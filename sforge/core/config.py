"""config.yaml, validated against config.schema.yaml, with CLI and environment overrides."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sforge.core import validated
from sforge.core.errors import SforgeError
from sforge.core.fileio import atomic_write_text, loads_json, read_bytes, read_utf8, user_cache

# The package's own files (schemas, templates, workflow), and the repository checkout (the
# bundled benchmark lives there, when sforge runs from one).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_DIR.parent
DEFAULT_BENCHMARK = "edgebench"  # the bundled benchmark's folder
# The Snakefile, rules/, config.yaml, profiles/, agents/ and helper/ (the Go sources), as
# installed with the package (links to the top-level ones in a checkout, copies in a wheel):
# the workflow runs from here.
WORKFLOW_DIR = PACKAGE_DIR / "workflow_files"
DEFAULT_CONFIG = WORKFLOW_DIR / "config.yaml"


def package_data(name: str) -> Path:
    """The package's data `name` (a file or folder of workflow_files/): the top-level one in
    a checkout, the installed copy in a wheel."""
    return (WORKFLOW_DIR / name).resolve()


_PARSED_KEEP = 16  # YAML documents remembered (the newest)


def safe_yaml(text: str, source: str | Path | None = None) -> Any:
    """yaml.safe_load, remembered by the text's digest in the user's cache: config.yaml and
    its schema are read on every command, and importing PyYAML and parsing them cost a
    tenth of a one-archive `sforge eval`. Each call gives its own copy. A document that is
    not plain JSON data (a YAML date, a number as a key) is parsed every time; a lost or
    unwritable memory only costs the parse. A syntax error is an SforgeError naming `source`
    (the file), the line and the column."""
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    memory = user_cache("yaml.json")
    try:
        known = loads_json(read_bytes(memory))
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    if key in known:
        return known[key]
    import yaml

    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise SforgeError(yaml_error_text(exc, source)) from None
    try:
        plain = json.loads(json.dumps(data)) == data
    except (TypeError, ValueError):
        plain = False
    if plain:
        kept = {k: v for k, v in known.items() if k != key}
        kept = dict(list(kept.items())[-(_PARSED_KEEP - 1):])
        kept[key] = data
        try:
            memory.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(memory, json.dumps(kept))
        except OSError:
            pass
    return data


def yaml_error_text(exc: Any, source: str | Path | None) -> str:
    """One line for a YAML syntax error: `FILE:LINE:COLUMN: YAML syntax error: what`."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = str(source or "<yaml>") + (f":{mark.line + 1}:{mark.column + 1}" if mark else "")
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}: YAML syntax error: {what}" + (f" ({context})" if context else "")


@functools.cache
def _defaults() -> dict[str, Any]:
    data = safe_yaml(DEFAULT_CONFIG.read_text()) or {}
    data.setdefault("benchmark", DEFAULT_BENCHMARK)
    return data


def defaults() -> dict[str, Any]:
    """config.yaml as shipped: the one place for every setting's default."""
    return copy.deepcopy(_defaults())


def games_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The games section with its defaults filled in."""
    return {**_defaults().get("games", {}), **(config.get("games") or {})}


def service_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The service section with its defaults filled in (config.yaml may set only some)."""
    return {**_defaults().get("service", {}), **(config.get("service") or {})}


def schema_path() -> Path:
    """The config.yaml schema shipped with the package."""
    return PACKAGE_DIR / "config.schema.yaml"


@functools.cache
def schema() -> dict[str, Any]:
    """The config.yaml schema, parsed once per process."""
    return safe_yaml(schema_path().read_text())


_JSON_TYPES = {"string": str, "boolean": bool, "null": type(None)}


def _typed(config: dict[str, Any]) -> dict[str, Any]:
    """`config` for the memory of checks that passed: a setting whose schema asks only for a
    type (the benchmark, results and submissions paths) stands as its type when it has it,
    so a new results directory or benchmark path needs no new schema check."""
    props = schema().get("properties") or {}
    out = dict(config)
    for name, value in config.items():
        rule = props.get(name)
        if not isinstance(rule, dict) or set(rule) - {"type", "description"}:
            continue
        kinds = rule.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds or []
        if kinds and all(k in _JSON_TYPES for k in kinds) and \
                any(type(value) is _JSON_TYPES[k] for k in kinds):
            out[name] = f"<{type(value).__name__}>"
    return out


def validate(config: dict[str, Any], source: str = "config") -> None:
    """The config against config.schema.yaml; SforgeError naming the first bad field. A
    configuration that passed before (same settings, same schema) is not checked again."""
    key = validated.digest(schema_path().read_text(), _typed(config))
    if validated.seen(key):
        return
    import jsonschema

    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(config))
    if errors:
        err = errors[0]
        field = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SforgeError(f"{source}: [{field}] {err.message}")
    validated.remember(key)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults < config.yaml < environment (SFORGE_BENCHMARK, SFORGE_REGISTRY) < overrides."""
    env = os.environ if env is None else env
    config = defaults()
    if path is not None and path.is_file():
        data = safe_yaml(read_utf8(path), path) or {}
        if not isinstance(data, dict):
            raise SforgeError(f"{path}: expected a mapping of settings")
        validate(data, str(path))
        config.update(data)
    if env.get("SFORGE_BENCHMARK"):
        config["benchmark"] = env["SFORGE_BENCHMARK"]
    if env.get("SFORGE_REGISTRY"):
        config["registry"] = env["SFORGE_REGISTRY"]
    config.update({k: v for k, v in (overrides or {}).items() if v is not None})
    validate(config, "configuration")
    return config


def user_config(path: Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The configuration a command runs with: `path` (default: the repository's config.yaml),
    the environment and `overrides`; relative paths taken from the working directory."""
    config = load_config(path if path is not None else DEFAULT_CONFIG, overrides)
    if config["benchmark"] == DEFAULT_BENCHMARK and not Path(DEFAULT_BENCHMARK).is_dir():
        config["benchmark"] = str(REPO_ROOT / DEFAULT_BENCHMARK)  # the bundled one
    # Relative paths mean the user's working directory, never the repository's.
    for key in ("benchmark", "results", "submissions"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    if overrides.get("results") is None and not _sets(path, "results"):
        config["results"] = str(default_results(Path(config["benchmark"])))
    require_results_dir(Path(config["results"]))
    return config


def require_results_dir(results: Path) -> None:
    """The results root is a directory, or can be made one: a regular file at its path (or
    at a parent's) is an SforgeError naming it, before anything is written under it."""
    blocker = next((p for p in (results, *results.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        what = "the results root" if blocker == results else f"holds the results root {results}"
        raise SforgeError(f"{blocker}: not a directory ({what}: --results, or `results` in "
                          "the config)")


RESULTS_HELP = ("results root (default: results/ beside the benchmark directory, i.e. "
                "<benchmark>/../results, wherever sforge runs)")


def default_results(benchmark: Path) -> Path:
    """The results root when neither --results nor a config file names one: `results/` beside
    the benchmark directory. In the repository that is results/ at its root beside
    edgebench/ (as plain `snakemake` there has it); from any other folder the bundled
    benchmark's results are the same ones, never a new ./results/ wherever sforge runs."""
    return benchmark.parent / "results"


def _sets(path: Path | None, key: str) -> bool:
    """Whether a config file the user named sets `key` (the shipped config.yaml only
    states the defaults)."""
    if path is None or not path.is_file():
        return False
    data = safe_yaml(read_utf8(path), path) or {}
    return isinstance(data, dict) and data.get(key) is not None
