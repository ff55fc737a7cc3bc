#!/usr/bin/env python3
"""Tail model of a launch's block order (docs/performance.md, "Block order").

Blocks are handed out in grid order to the SM with the fewest resident blocks (up to per_sm)
as blocks finish; each block costs
overhead + its length in key tiles; an SM running one block instead of `per_sm` runs it at
`lone_rate` of its full throughput (processor sharing). Prints the makespan of the order a
kernel used before (head after head, each head's longest tile first) against longest first
over all heads, for the dense / soft Focus kernels (causal tiles) and the hard-routed list
group pass (group after group vs longest first over groups).
Usage: python3 scripts/bench/tail_model.py
"""
import random


def makespan(lengths, sms, per_sm, overhead, lone_rate):
    slots, queue, t = [[] for _ in range(sms)], list(lengths), 0.0
    def fill():  # breadth-first, as the block scheduler: the SM with the fewest blocks first
        while queue:
            s = min(slots, key=len)
            if len(s) >= per_sm:
                break
            s.append(overhead + queue.pop(0))
    fill()
    while any(slots):
        rate = lambda s: lone_rate if len(s) == 1 and per_sm > 1 else 1.0 / len(s)
        dt = min(min(s) / rate(s) for s in slots if s)
        for s in slots:
            if s:
                r = rate(s)
                s[:] = [x - r * dt for x in s if x - r * dt > 1e-9]
        t += dt
        fill()
    return t


def report(name, before, sms, per_sm, overhead=1.0, lone_rate=0.7):
    a = makespan(before, sms, per_sm, overhead, lone_rate)
    b = makespan(sorted(before, reverse=True), sms, per_sm, overhead, lone_rate)
    print(f"{name:44s} before {a:8.1f}  longest first {b:8.1f}  ({100 * (1 - b / a):5.1f}% less)")


def main():
    sms, heads = 132, 12
    for T in (1024, 2048, 4096, 16384):
        n = T // 128
        causal = [j + 1 for _ in range(heads) for j in reversed(range(n))]
        report(f"causal, 12 heads, T {T}, 1 block/SM", causal, sms, 1)
        report(f"causal, 12 heads, T {T}, 2 blocks/SM", causal, sms, 2)
    rnd = random.Random(1)
    for T in (2048, 4096, 8192):
        for kind in ("balanced", "unbalanced"):
            K = 8
            if kind == "balanced":
                sizes = [T // K] * K
            else:
                w = [rnd.gammavariate(8, 1) for _ in range(K)]
                sizes = [int(T * x / sum(w)) for x in w]
            tiles = [(c + 127) // 128 for c in sizes]
            # list group pass: tile j of a group walks 2 (j + 1) key tiles of 64
            blocks = [2 * (j + 1) for _ in range(heads) for g in reversed(range(K))
                      for j in reversed(range(tiles[g]))]
            report(f"hard list group pass, K 8, {kind}, T {T}", blocks, sms, 2)


if __name__ == "__main__":
    main()
