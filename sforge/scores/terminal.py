"""The leaderboard as the terminal shows it, remembered beside leaderboard.csv by that file's
stat and the sforge version that made the text: `sforge report` with nothing changed
prints it without importing pandas (~0.5 s). Every write of leaderboard.csv is a new file
(atomic rename), so a remembered text never stands for another table."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sforge import __version__
from sforge.core.fileio import atomic_write_bytes
from sforge.scores.cache import dump_bytes, load_bytes, stat_sig

log = logging.getLogger(__name__)
_VERSION = "1"


def _memo_path(leaderboard_csv: Path) -> Path:
    return leaderboard_csv.parent / ".cache" / f"{leaderboard_csv.name}.text"


def leaderboard_text(leaderboard_csv: Path) -> str:
    """The leaderboard for the terminal, as a Markdown table."""
    leaderboard_csv = Path(leaderboard_csv)
    try:
        sig = stat_sig(os.stat(leaderboard_csv))
    except OSError:
        sig = None
    memo = _memo_path(leaderboard_csv)
    if sig is not None:
        try:
            data = load_bytes(memo.read_bytes())
            if isinstance(data, dict) and data.get("version") == [_VERSION, __version__] \
                    and data.get("csv") == sig and isinstance(data.get("text"), str):
                return data["text"]
        except (OSError, ValueError):
            pass
    # start-up: pandas (~0.7 s), only when the printed text is not remembered
    from sforge.scores.leaderboard import board_text

    text = board_text(leaderboard_csv)
    if sig is not None:
        try:
            atomic_write_bytes(memo, dump_bytes({"version": [_VERSION, __version__], "csv": sig,
                                                   "text": text}))
        except OSError as exc:  # a read-only tree: made each time
            log.debug("cannot write %s: %s", memo, exc)
    return text
