"""Read a knapsack instance on stdin, print the indices of the items to pack.

Starter: packs nothing (a feasible solution worth 0). Replace it with something better.
"""

import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, capacity = int(data[0]), int(data[1])
    weights = [int(x) for x in data[2::2]][:n]
    values = [int(x) for x in data[3::2]][:n]
    print(" ".join(map(str, pack(capacity, weights, values))))


def pack(capacity: int, weights: list[int], values: list[int]) -> list[int]:
    return []


if __name__ == "__main__":
    main()
