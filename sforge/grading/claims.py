"""Per-key grading claims: any number of sforge processes, hosts and the judge service on one
results directory grade each eval key once.

A claim is a small JSON file next to the result (evals/<task>/<key>.claim) holding its
owner (host, pid, process start; inside a SLURM job also the job's run: job id, restart
count, node), a random token and a deadline (epoch seconds). It is
written to a private temporary file first, then hard-linked into place: link(2) fails if the
name exists, atomically, on local filesystems and on NFS (the classic NFS lock recipe: the
exclusive create that also survives a retransmitted request, checked by the link count), so
a claim is never seen half-written. flock would not do: NFSv3 clients may not honour it.

A claim whose owner died or whose deadline passed is stale and is taken over. On the owner's
host a dead owner is seen directly (pid gone or reused); on another host only SLURM can say
it (the owner's job run is no longer running on its node: the node died and the job was
requeued, or the job ended), see `sforge.containers.slurmjob`; otherwise the deadline decides. Stale
claims are renamed away (only one contender's rename succeeds), checked to be the
very claim judged stale (else put back), removed, and the key claimed afresh. A holder
removes only its own claim (by token), so a claim taken over from it is never removed by it.

Callers: the one grading function, `grade` (hence the CLI, the Snakemake rule and the judge
service), calls `acquire(path, ttl_s, done)` around the judge run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sforge.containers import owner, slurmjob

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 0.25
# Claims are linked complete, so one that is not valid JSON is damage from outside: taken over
# once it is this old (its mtime), in case it is a foreign tool's half-written copy.
_BROKEN_GRACE_S = 30.0


@dataclass(frozen=True)
class Claim:
    """A claim this process holds: its file, its token and its deadline."""
    path: Path
    token: str
    deadline: float


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim's record; None when there is no claim. A damaged record reads as {}."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def stale_reason(path: Path, record: dict[str, Any]) -> str | None:
    """Why the claim with this record may be taken over, or None while its owner may finish."""
    if not record.get("token"):
        try:
            age = time.time() - Path(path).stat().st_mtime
        except FileNotFoundError:
            return None
        return "damaged claim" if age > _BROKEN_GRACE_S else None
    deadline = record.get("deadline")
    reason = owner.gone(record.get("host"), record.get("pid"), record.get("start"),
                        float(deadline) if isinstance(deadline, int | float) else None)
    if reason is None and record.get("host") != owner.hostname():
        reason = slurmjob.ended(record)
    return reason


def try_claim(path: Path, ttl_s: float, what: str = "") -> Claim | None:
    """Claim `path` for `ttl_s` seconds; None when someone else holds it (stale or not)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = os.urandom(16).hex()  # (uuid4's randomness; importing uuid costs an eval 4 ms)
    deadline = time.time() + ttl_s
    record = {**owner.identity(), **slurmjob.incarnation(), "token": token, "deadline": deadline,
              "claimed_at": time.time(), "what": what}
    tmp = path.with_name(f".{path.name}.{token}.tmp")
    tmp.write_text(json.dumps(record))
    try:
        os.link(tmp, path)
    except FileExistsError:
        return None
    except OSError:
        # NFS: the reply to a retransmitted link may be an error although the link was made.
        if os.stat(tmp).st_nlink != 2:
            raise
    finally:
        tmp.unlink(missing_ok=True)
    return Claim(path, token, deadline)


def release(claim: Claim) -> None:
    """Remove the claim if it is still ours (never one taken over from us)."""
    record = read_claim(claim.path)
    if record and record.get("token") == claim.token:
        claim.path.unlink(missing_ok=True)


def break_stale(path: Path, record: dict[str, Any], reason: str) -> bool:
    """Remove the stale claim `record` read from `path`; True if it is gone (by us or another)."""
    aside = path.with_name(f".{path.name}.{os.urandom(16).hex()}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # another contender moved it first
    moved = read_claim(aside) or {}
    if moved.get("token") != record.get("token"):
        # Between our read and our rename the stale claim was replaced by a live one: put it
        # back (link: never over a claim made meanwhile).
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    log.warning("sforge: taking over the grading claim %s (%s: pid %s on %s)", path, reason,
                record.get("pid"), record.get("host"))
    return True


def acquire(path: Path, ttl_s: float, done: Callable[[], T | None], *, what: str = "",
            poll_s: float = POLL_S) -> tuple[Claim | None, T | None]:
    """Claim `path`, or wait for whoever holds it to finish.

    `done()` returns the finished product (e.g. the result) or None. → (claim, None) when the
    caller holds the claim and must produce it, then `release` it; (None, product) when it
    exists already or another holder made it meanwhile. A holder that dies or overruns its
    deadline is taken over. Waits as long as a live holder's deadline allows.
    """
    path = Path(path)
    while True:
        product = done()
        if product is not None:
            return None, product
        claim = try_claim(path, ttl_s, what)
        if claim is not None:
            product = done()  # made between our check and our claim: nothing to do
            if product is not None:
                release(claim)
                return None, product
            return claim, None
        record = read_claim(path)
        if record is None:
            continue  # released meanwhile: look again
        reason = stale_reason(path, record)
        if reason is not None:
            break_stale(path, record, reason)
            continue
        time.sleep(poll_s)


@contextlib.contextmanager
def holding(path: Path, ttl_s: float, done: Callable[[], T | None], *, what: str = ""
            ) -> Iterator[tuple[Claim | None, T | None]]:
    """`acquire` as a context manager: the claim (if taken) is released on exit."""
    claim, product = acquire(path, ttl_s, done, what=what)
    try:
        yield claim, product
    finally:
        if claim is not None:
            release(claim)
