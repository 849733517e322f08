#!/usr/bin/python3
"""Generate the log_triage data: hidden datasets (→ blob) and the public sample.

    hidden/<dataset>/access.log, hidden/<dataset>/expected.json   → judge/blobs/hidden.tar.gz
    ../../tasks/log_triage/environment/workspace/sample/{access.log,expected.json}

The expected answers come from the generator's own records (ground truth), not from
parsing the logs, so they check the reference solution independently. Deterministic: only
random.Random(seed).random() is used, whose sequence Python guarantees across versions.
The committed files are authoritative; rerun only to change the data, then rebuild the
blob (make_blobs.py), update its sha256 in task.toml and bump the task version.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from random import Random

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parents[1] / "tasks" / "log_triage" / "environment" / "workspace" / "sample"
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
PATHS = ["/", "/index.html", "/login", "/logout", "/api/v1/items", "/api/v1/orders",
         "/api/v1/search", "/static/app.js", "/static/app.css", "/healthz", "/admin",
         "/img/logo.png", "/cart", "/checkout", "/api/v2/report"]
SLOW = {"/api/v1/search": 3.0, "/api/v2/report": 3.2, "/checkout": 2.0}
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/126.0", "curl/8.5.0", "Go-http-client/2.0",
          "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15"]
METHODS = ["GET"] * 8 + ["POST", "HEAD"]


class Gen:
    def __init__(self, seed: int):
        self.rng = Random(seed)

    def random(self) -> float:
        return self.rng.random()

    def int(self, lo: int, hi: int) -> int:
        return lo + int(self.rng.random() * (hi - lo + 1))

    def pick(self, seq):
        return seq[int(self.rng.random() * len(seq))]


def client(g: Gen) -> str:
    if g.random() < 0.2:
        return f"2001:db8:{g.int(0, 15):x}::{g.int(1, 4095):x}"
    return f"192.0.2.{g.int(1, 60)}" if g.random() < 0.5 else f"198.51.100.{g.int(1, 40)}"


def stamp(t: datetime, offset_min: int) -> str:
    tz = timezone(timedelta(minutes=offset_min))
    loc = t.astimezone(tz)
    sign = "+" if offset_min >= 0 else "-"
    hh, mm = divmod(abs(offset_min), 60)
    return (f"{loc.day:02d}/{MONTHS[loc.month - 1]}/{loc.year}:{loc.hour:02d}:{loc.minute:02d}:"
            f"{loc.second:02d} {sign}{hh:02d}{mm:02d}")


def malformed(g: Gen, good: str) -> str:
    kind = g.int(0, 5)
    if kind == 0:
        return good[: g.int(10, len(good) - 10)]                   # truncated
    if kind == 1:
        return good.replace(" rt=", " rt=-")                       # bad response time
    if kind == 2:
        return good.replace("HTTP/1.1", "HTTP/1.1 extra")          # stray token
    if kind == 3:
        return "-- log rotated --"
    if kind == 4:
        return good.rsplit(" rt=", 1)[0]                           # no response time
    return good.replace("] \"", "]  \"", 1)                       # double space


def dataset(seed: int, lines: int, offsets: list[int], start: str) -> tuple[str, dict]:
    g = Gen(seed)
    t = datetime.fromisoformat(start)
    out, recs, bad = [], [], 0
    outage_at = g.int(lines // 3, 2 * lines // 3)
    for i in range(lines):
        t += timedelta(seconds=g.int(0, 3))
        path = g.pick(PATHS)
        target = path + (f"?q={g.int(1, 999)}&page={g.int(1, 9)}" if g.random() < 0.25 else "")
        in_outage = outage_at <= i < outage_at + 40
        status = g.pick([200] * 14 + [201, 204, 301, 304, 400, 401, 404, 500, 502, 503])
        if in_outage and g.random() < 0.7:
            status = g.pick([500, 502, 503, 504])
        size = "-" if status in (204, 304) or g.random() < 0.03 else str(g.int(0, 90000))
        base = SLOW.get(path, 1.0)
        rt_ms = int(base * (20 + g.int(0, 180)) * (1 + 4 * g.random() ** 8))
        ip = client(g)
        off = g.pick(offsets)
        user = "-" if g.random() < 0.9 else f"user{g.int(1, 9)}"
        line = (f'{ip} - {user} [{stamp(t, off)}] "{g.pick(METHODS)} {target} HTTP/1.1" {status} '
                f'{size} "-" "{g.pick(AGENTS)}" rt={rt_ms // 1000}.{rt_ms % 1000:03d}')
        if g.random() < 0.04:
            out.append(malformed(g, line))
            bad += 1
            continue
        if g.random() < 0.01:
            out.append("")
        out.append(line)
        recs.append({"ip": ip, "path": path, "status": status, "bytes": 0 if size == "-" else
                     int(size), "rt": rt_ms, "utc": t})
    return "\n".join(out) + "\n", answers(recs, bad)


def rank(values: list[int], pct: int) -> int:
    s = sorted(values)
    return s[math.ceil(pct * len(s) / 100) - 1]


def answers(recs: list[dict], bad: int) -> dict:
    paths = Counter(r["path"] for r in recs)
    by_path = defaultdict(list)
    for r in recs:
        by_path[r["path"]].append(r["rt"])
    medians = {p: rank(v, 50) for p, v in by_path.items() if len(v) >= 10}
    slowest = min(medians, key=lambda p: (-medians[p], p)) if medians else None
    minutes = Counter(r["utc"].astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
                      for r in recs if r["status"] >= 500)
    busiest = min(minutes, key=lambda m: (-minutes[m], m)) if minutes else None
    return {
        "requests": len(recs),
        "malformed": bad,
        "status_5xx": sum(r["status"] >= 500 for r in recs),
        "unique_clients": len({r["ip"] for r in recs}),
        "bytes_total": sum(r["bytes"] for r in recs),
        "top_paths": sorted(paths, key=lambda p: (-paths[p], p))[:5],
        "p95_ms": rank([r["rt"] for r in recs], 95) if recs else None,
        "slowest_path": slowest,
        "busiest_5xx_minute": busiest,
    }


def write(directory: Path, log: str, expected: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "access.log").write_text(log)
    (directory / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{directory.relative_to(HERE.parents[1])}: {len(log)} bytes, "
          f"{expected['requests']} requests")


def main() -> None:
    write(HERE / "hidden" / "d1", *dataset(101, 1200, [0], "2024-06-10T21:30:00+00:00"))
    write(HERE / "hidden" / "d2", *dataset(102, 1800, [120, -300], "2024-06-30T22:45:00+00:00"))
    write(HERE / "hidden" / "d3", *dataset(103, 1800, [330, -210, 0, 60],
                                           "2024-12-31T23:10:00+00:00"))
    write(SAMPLE, *dataset(7, 600, [120], "2024-06-01T08:00:00+00:00"))


if __name__ == "__main__":
    main()
