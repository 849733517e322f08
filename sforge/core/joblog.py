"""A job's log file: what one step (a rule's job, a table, an agent run) did, in the file its
rule's `log:` names."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def job_log(log: str | Path | None, what: str) -> Iterator[None]:
    """Record one job in the file its rule's `log:` names: start, sforge's log messages
    from this thread (warnings of the aggregation, for one), the time taken or the error."""
    if log is None:
        yield
        return
    path = Path(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)  # jobs run in threads
    logger = logging.getLogger("sforge")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    start = time.monotonic()
    logger.info("%s: started", what)
    try:
        yield
    except BaseException as exc:
        logger.error("%s: failed: %s\n%s", what, exc, traceback.format_exc())
        raise
    else:
        logger.info("%s: done in %.2f s", what, time.monotonic() - start)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
