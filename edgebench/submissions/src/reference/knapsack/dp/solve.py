"""Reference: exact dynamic programme over capacities, with item reconstruction."""

import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, capacity = int(data[0]), int(data[1])
    items = [(int(data[2 + 2 * i]), int(data[3 + 2 * i])) for i in range(n)]
    best = [0] * (capacity + 1)
    took = []  # took[i][c]: item i improved capacity c
    for w, v in items:
        row = bytearray(capacity + 1)
        for c in range(capacity, w - 1, -1):
            cand = best[c - w] + v
            if cand > best[c]:
                best[c] = cand
                row[c] = 1
        took.append(row)
    chosen, c = [], capacity
    for i in range(n - 1, -1, -1):
        if took[i][c]:
            chosen.append(i)
            c -= items[i][0]
    print(" ".join(map(str, sorted(chosen))))


if __name__ == "__main__":
    main()
