#!/usr/bin/env python3
"""Tail model of a launch's block order (docs/performance.md, "Block order").

Blocks are handed out in grid order to the SM with the fewest resident blocks (up to per_sm)
as blocks finish; each block costs
overhead + its length in key tiles; an SM running one block instead of `per_sm` runs it at
`lone_rate` of its full throughput (processor sharing). Prints the makespan of the order a
kernel used before (head after head, each head's longest tile first) against longest first
over all heads, for the dense / soft Focus kernels (causal tiles) and the hard-routed list
group pass (group after group vs longest first over groups); then the hard-routed forward at
4K under each order of its passes, calibrated on measured kernel times (hard_4k_orders).
Usage: python3 scripts/bench/tail_model.py
"""
import random


def makespan(lengths, sms, per_sm, overhead, lone_rate):
    return makespan_released([(0.0, overhead + x) for x in lengths], sms, per_sm, lone_rate)


def makespan_released(blocks, sms, per_sm, lone_rate):
    """makespan with blocks [(release, cost)] in hand-out priority order: a free slot takes the
    first block already released (kernels launched later, or after a dependency, release later)."""
    slots, queue, t = [[] for _ in range(sms)], list(blocks), 0.0
    def fill():
        while True:
            s = min(slots, key=len)
            i = next((k for k, (r, _) in enumerate(queue) if r <= t + 1e-9), None)
            if len(s) >= per_sm or i is None:
                return
            s.append(queue.pop(i)[1])
    fill()
    while any(slots) or queue:
        rate = lambda s: lone_rate if len(s) == 1 and per_sm > 1 else 1.0 / len(s)
        busy = [min(s) / rate(s) for s in slots if s]
        pending = [r - t for r, _ in queue if r > t + 1e-9]
        dt = min(busy + pending)
        for s in slots:
            if s:
                r = rate(s)
                s[:] = [x - r * dt for x in s if x - r * dt > 1e-9]
        t += dt
        fill()
    return t


def hard_4k_orders(sms=132, heads=12, K=8, T=4096, lone_rate=0.7):
    """The hard-routed forward at 4K (12 x 64, K 8, top_k 1, balanced) under each order of its
    passes, in microseconds, calibrated on the H200's ncu times (2026-12-04): index 14, band pass
    23, list group pass 49 (group-major order), gather 10, sorted pass 30 (head after head). Each block costs overhead + its tiles; the unit of
    each pass is fitted so that the pass alone takes its measured time."""
    tiles = T // K // 128
    group = lambda order: [(0.0, 1.0 + 2 * (j + 1)) for j in order for _ in range(heads)
                           for _ in range(K)]
    gm = [(0.0, 1.0 + 2 * (j + 1)) for _ in range(heads) for _ in range(K)
          for j in reversed(range(tiles))]
    lf = group(reversed(range(tiles)))
    u_g = 49.0 / makespan_released(gm, sms, 2, lone_rate)
    scale = lambda blocks, u: [(0.0, c * u) for _, c in blocks]
    run = lambda blocks: makespan_released(blocks, sms, 2, lone_rate)
    index, gather = 14.0, 10.0
    g_lf = run(scale(lf, u_g))
    # The sorted pass (ncu 30 us at 4K, writing its partial): block b of a group's segment walks
    # j + 1 key tiles of 128 (segments of T / K entries here), head after head before, longest
    # first over groups and heads now.
    seg, nblk = T // K, T // 128
    length = lambda b: b - (b * 128 // seg) * seg // 128 + 1
    s_old = [(0.0, 1.0 + 2 * length(b)) for _ in range(heads) for b in reversed(range(nblk))]
    s_lf = sorted(s_old, key=lambda x: -x[1])
    u_s = 30.0 / run(s_old)
    sorted_lf = run(scale(s_lf, u_s))
    print(f"hard forward at 4K, model calibrated on ncu (us; dense measured 106):")
    print(f"  group pass alone: group-major {run(scale(gm, u_g)):5.1f}, longest first {g_lf:5.1f}")
    print(f"  band first, list pass:        max(index, band) + group = {max(index, 23.0) + g_lf:5.1f}")
    print(f"  sorted pass alone: head after head 30.0, longest first {sorted_lf:5.1f}")
    print(f"  band first, sorted pass:      max(index + gather, band) + sorted = "
          f"{max(index + gather, 23.0) + sorted_lf:5.1f}")
    print("  (kernel time only: the launch gaps, the fork and the join are not modelled)")


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
    hard_4k_orders()


if __name__ == "__main__":
    main()
