"""Reference: the README's rules, literally."""

import json
import math
import re
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta, timezone

LINE = re.compile(
    r'(?P<client>\S+) - (?P<user>\S+) \[(?P<day>\d{2})/(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|'
    r'Aug|Sep|Oct|Nov|Dec)/(?P<year>\d{4}):(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2}) '
    r'(?P<tz>[+-]\d{4})\] "(?P<method>[A-Z]+) (?P<target>\S+) HTTP/(?:1\.0|1\.1|2\.0)" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)" '
    r'rt=(?P<rt>\d+\.\d{3})'
)
MONTHS = {m: i + 1 for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                          "Sep", "Oct", "Nov", "Dec"])}


def rank(values, pct):
    s = sorted(values)
    return s[math.ceil(pct * len(s) / 100) - 1]


def utc_minute(m):
    sign = 1 if m["tz"][0] == "+" else -1
    off = timedelta(hours=int(m["tz"][1:3]), minutes=int(m["tz"][3:5])) * sign
    local = datetime(int(m["year"]), MONTHS[m["month"]], int(m["day"]), int(m["hour"]),
                     int(m["minute"]), int(m["second"]), tzinfo=timezone(off))
    return local.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def main():
    text = sys.stdin.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    valid, malformed = [], 0
    for line in lines:
        if line == "":
            continue
        m = LINE.fullmatch(line)
        if m:
            valid.append(m)
        else:
            malformed += 1
    paths = Counter(m["target"].split("?", 1)[0] for m in valid)
    rts = defaultdict(list)
    for m in valid:
        sec, ms = m["rt"].split(".")
        rts[m["target"].split("?", 1)[0]].append(int(sec) * 1000 + int(ms))
    all_rt = [v for vs in rts.values() for v in vs]
    medians = {p: rank(v, 50) for p, v in rts.items() if len(v) >= 10}
    errors = Counter(utc_minute(m) for m in valid if 500 <= int(m["status"]) <= 599)
    print(json.dumps({
        "requests": len(valid),
        "malformed": malformed,
        "status_5xx": sum(errors.values()),
        "unique_clients": len({m["client"] for m in valid}),
        "bytes_total": sum(int(m["bytes"]) for m in valid if m["bytes"] != "-"),
        "top_paths": sorted(paths, key=lambda p: (-paths[p], p))[:5],
        "p95_ms": rank(all_rt, 95) if all_rt else None,
        "slowest_path": min(medians, key=lambda p: (-medians[p], p)) if medians else None,
        "busiest_5xx_minute": min(errors, key=lambda k: (-errors[k], k)) if errors else None,
    }))


if __name__ == "__main__":
    main()
