"""Baseline: greedy by value/weight ratio (ties: lower index first)."""

import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, capacity = int(data[0]), int(data[1])
    items = [(int(data[2 + 2 * i]), int(data[3 + 2 * i])) for i in range(n)]
    order = sorted(range(n), key=lambda i: (-items[i][1] / items[i][0], i))
    chosen, room = [], capacity
    for i in order:
        if items[i][0] <= room:
            chosen.append(i)
            room -= items[i][0]
    print(" ".join(map(str, sorted(chosen))))


if __name__ == "__main__":
    main()
