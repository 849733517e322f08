"""Baseline: split on spaces, keep lines that look long enough, ignore time zones."""

import json
import sys
from collections import Counter, defaultdict
from datetime import datetime


def main():
    rows = [line.split() for line in sys.stdin if line.strip()]
    ok = [r for r in rows if len(r) >= 12 and r[-1].startswith("rt=") and r[8].isdigit()]
    paths = Counter(r[6].split("?")[0] for r in ok)
    times = defaultdict(list)
    for r in ok:
        times[r[6].split("?")[0]].append(float(r[-1][3:]))
    rts = sorted(t for ts in times.values() for t in ts)
    means = {p: sum(ts) / len(ts) for p, ts in times.items() if len(ts) >= 10}
    bad5 = Counter(datetime.strptime(r[3][1:], "%d/%b/%Y:%H:%M:%S").strftime("%Y-%m-%dT%H:%MZ")
                   for r in ok if r[8].startswith("5"))
    print(json.dumps({
        "requests": len(ok),
        "malformed": len(rows) - len(ok),
        "status_5xx": sum(r[8].startswith("5") for r in ok),
        "unique_clients": len({r[0] for r in ok}),
        "bytes_total": sum(int(r[9]) for r in ok if r[9].isdigit()),
        "top_paths": [p for p, _ in paths.most_common(5)],
        "p95_ms": round(rts[int(0.95 * len(rts))] * 1000) if rts else None,
        "slowest_path": max(means, key=means.get) if means else None,
        "busiest_5xx_minute": bad5.most_common(1)[0][0] if bad5 else None,
    }))


if __name__ == "__main__":
    main()
