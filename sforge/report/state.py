"""Which task pages of a report stand as they are, without pandas or the templates: deciding
that `sforge report` has nothing to render (a CI job that graded nothing new) must not cost
their imports. Also the source colours, which a page's state includes."""

from __future__ import annotations

import colorsys
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sforge import __version__
from sforge.benchmark.layout import Layout
from sforge.benchmark.model import Benchmark
from sforge.scores.cache import load_bytes
from sforge.scores.proofs import Proof, proof_badge, read_proofs

PAGES_VERSION = "3"
RUNS_PAGE = "runs.html"  # report/runs.html, beside the task pages (sforge.report.run_pages)


def source_color(source: str) -> str:
    """A source's colour, from a hash of its name alone: the same in every report, whatever
    other sources it has (a colour by position shifted when one was added). A hue from the
    hash, at a saturation and lightness that read on white and under black text."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
    hue = int.from_bytes(digest[:2], "big") * 360 / 65536
    lightness = 0.38 + digest[2] / 255 * 0.14  # 38–52 %
    saturation = 0.55 + digest[3] / 255 * 0.3  # 55–85 %
    r, g, b = colorsys.hls_to_rgb(hue / 360, lightness, saturation)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


def source_colors(sources: Sequence[str]) -> dict[str, str]:
    """One colour per source, the same on every page and plot (source_color)."""
    return {s: source_color(s) for s in sorted(set(sources))}


def entry_colors(entries: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The colours of every source of the index entries (task → entry)."""
    return source_colors(sorted({s for e in entries.values() for s in e["sources"]}))


def page_state_path(root: Path) -> Path:
    """Where the state of the task pages on disk is kept (stored_pages)."""
    return root / ".cache" / "report-pages.json"


def stored_pages(root: Path) -> dict[str, Any]:
    """task → what its page on disk was rendered from (page_wants' entries)."""
    try:
        state = load_bytes(page_state_path(root).read_bytes())
    except (OSError, ValueError):
        return {}
    pages = state.get("pages") if isinstance(state, dict) \
        and state.get("version") == PAGES_VERSION else None
    return pages if isinstance(pages, dict) else {}


def page_wants(benchmark: Benchmark, entries: dict[str, dict[str, Any]],
               fingerprints: dict[str, str | None],
               proofs: dict[str, dict[str, Proof]]) -> dict[str, list[Any]]:
    """task → what its page is made from: its folder fingerprint, sforge's version, its
    sources with their colours and what its proofs say (read_proofs)."""
    colors = entry_colors(entries)
    return {t: [fingerprints.get(t), __version__,
                [[s, colors[s]] for s in (entries[t]["sources"] if t in entries else [])],
                list(proof_badge(proofs.get(t, {})))]
            for t in benchmark.tasks}


def kept_pages(wanted: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The page state stored: a page made without a fingerprint is not kept (rendered again)."""
    return {t: w for t, w in wanted.items() if w[0] is not None}


def quote_name(text: str) -> str:
    """urllib's quote, skipped for what it leaves as it is (eval keys are hex: a page
    links 1,000 of them)."""
    return text if text.isascii() and text.isalnum() else quote(text)


def page_name(task_id: str) -> str:
    """A task page's file name in report/."""
    return f"{quote_name(task_id)}.html"


def pages_to_render(benchmark: Benchmark, root: Path, wanted: dict[str, list[Any]],
                    pages: dict[str, Any], made: Sequence[str] = ()) -> list[str]:
    """The tasks whose page is rendered again: computed anew, without a fingerprint, made
    from anything else than the page on disk, or missing."""
    pages_dir = Layout(root).report_pages
    done = set(made)
    return [t for t in benchmark.tasks
            if t in done or wanted[t][0] is None or pages.get(t) != wanted[t]
            or not (pages_dir / page_name(t)).is_file()]


def report_current(benchmark: Benchmark, out_html: Path, parts: dict[str, Any],
                   fingerprints: dict[str, str | None]) -> bool:
    """Whether report.html and every task page stand as update_report would leave them
    when no table changed (`parts`: the stored ones)."""
    root = Path(out_html).parent
    wanted = page_wants(benchmark, {t: p["index"] for t, p in parts.items()}, fingerprints,
                        read_proofs(benchmark, root))
    pages = stored_pages(root)
    return Path(out_html).is_file() and kept_pages(wanted) == pages and \
        not pages_to_render(benchmark, root, wanted, pages)
