#!/usr/bin/python3
"""Regenerate this task's corpora: judge/data/ (hidden) and environment/workspace/samples/.

Deterministic: only random.Random(seed).random() is used, whose sequence Python guarantees
across versions. The committed files are authoritative; rerun only to change the data
(and bump the task version). Usage: python3 gen_corpus.py
"""

from __future__ import annotations

import json
from pathlib import Path
from random import Random

HERE = Path(__file__).resolve().parent
WORDS = (  # noqa: SIM905 - a word list reads better as text
    "the of and to in is was that for on with as by at from his her it an were which are "
    "this be had not but have they one their all been has there more when will would who "
    "river stone light winter garden letter morning voice window harbour market evening "
    "slowly quietly never always again almost perhaps beyond under between across toward "
    "walked carried watched opened remembered followed listened wondered answered turned "
    "old small bright distant cold narrow green heavy silent gentle strange familiar"
).split()
PATHS = ["/", "/index.html", "/login", "/api/v1/items", "/api/v1/items/{}", "/static/app.js",
         "/static/style.css", "/search?q={}", "/cart", "/checkout", "/img/{}.png"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/126.0", "curl/8.5.0",
          "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/125.0", "python-requests/2.31"]


class Gen:
    def __init__(self, seed: int):
        self.rng = Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return lo + int(self.rng.random() * (hi - lo + 1))

    def pick(self, seq):
        return seq[int(self.rng.random() * len(seq))]


def access_log(g: Gen, lines: int) -> bytes:
    out, t = [], 1718000000
    ips = [f"10.{g.int(0, 9)}.{g.int(0, 255)}.{g.int(1, 254)}" for _ in range(40)]
    for _ in range(lines):
        t += g.int(0, 4)
        path = g.pick(PATHS).replace("{}", str(g.int(1, 500)))
        status = g.pick([200] * 12 + [304, 301, 404, 500])
        day, rem = divmod(t - 1718000000, 86400)
        hh, rem = divmod(rem, 3600)
        mm, ss = divmod(rem, 60)
        out.append(f'{g.pick(ips)} - - [{10 + day:02d}/Jun/2024:{hh:02d}:{mm:02d}:{ss:02d} +0000] '
                   f'"GET {path} HTTP/1.1" {status} {g.int(120, 48000)} "-" "{g.pick(AGENTS)}"')
    return ("\n".join(out) + "\n").encode()


def readings_csv(g: Gen, rows: int) -> bytes:
    out, t = ["timestamp,sensor,temperature_c,humidity_pct"], 1718000000
    temps = {s: 18.0 + g.int(0, 60) / 10 for s in range(8)}
    for _ in range(rows):
        t += 15
        s = g.int(0, 7)
        temps[s] = round(temps[s] + (g.int(0, 6) - 3) / 10, 1)
        out.append(f"{t},S{s:02d},{temps[s]:.1f},{g.int(300, 700) / 10:.1f}")
    return ("\n".join(out) + "\n").encode()


def genome_fasta(g: Gen, bases: int) -> bytes:
    seq: list[str] = []
    while len(seq) < bases:
        if len(seq) > 500 and g.rng.random() < 0.3:  # a repeat of earlier sequence
            start = g.int(0, len(seq) - 200)
            seq.extend(seq[start:start + g.int(50, 200)])
        else:
            seq.extend(g.pick("ACGT") for _ in range(g.int(20, 120)))
    text = "".join(seq[:bases])
    lines = [">chrE1 synthetic EdgeBench sequence"]
    lines += [text[i:i + 60] for i in range(0, len(text), 60)]
    return ("\n".join(lines) + "\n").encode()


def events_jsonl(g: Gen, rows: int) -> bytes:
    out, t = [], 1718000000000
    kinds = ["click", "view", "purchase", "signup", "logout"]
    for i in range(rows):
        t += g.int(0, 5000)
        ev = {"id": 100000 + i, "ts": t, "user": f"u{g.int(1, 300):04d}", "kind": g.pick(kinds),
              "amount": round(g.int(0, 20000) / 100, 2) if g.rng.random() < 0.2 else None,
              "tags": [g.pick(WORDS) for _ in range(g.int(0, 3))]}
        out.append(json.dumps(ev, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def prose(g: Gen, sentences: int) -> bytes:
    paras, para = [], []
    for _ in range(sentences):
        words = [g.pick(WORDS) for _ in range(g.int(6, 18))]
        para.append(" ".join(words).capitalize() + g.pick([".", ".", ".", "?", "!"]))
        if g.rng.random() < 0.15:
            paras.append(" ".join(para))
            para = []
    paras.append(" ".join(para))
    return ("\n\n".join(paras) + "\n").encode()


def noise(g: Gen, size: int) -> bytes:
    return bytes(g.int(0, 255) for _ in range(size))


def main() -> None:
    hidden = HERE / "judge" / "data"
    samples = HERE / "environment" / "workspace" / "samples"
    files = {
        hidden / "access.log": access_log(Gen(11), 900),
        hidden / "readings.csv": readings_csv(Gen(12), 2500),
        hidden / "genome.fa": genome_fasta(Gen(13), 60000),
        hidden / "events.jsonl": events_jsonl(Gen(14), 700),
        hidden / "prose.txt": prose(Gen(15), 500),
        hidden / "noise.bin": noise(Gen(16), 4096),
        samples / "access.log": access_log(Gen(21), 300),
        samples / "readings.csv": readings_csv(Gen(22), 800),
        samples / "genome.fa": genome_fasta(Gen(23), 20000),
        samples / "events.jsonl": events_jsonl(Gen(24), 250),
        samples / "prose.txt": prose(Gen(25), 150),
        samples / "noise.bin": noise(Gen(26), 1024),
    }
    for path, data in files.items():
        path.write_bytes(data)
        print(f"{path.relative_to(HERE)}: {len(data)} bytes")


if __name__ == "__main__":
    main()
