"""Timing shared by the PyTorch peer scripts (sdpa_peer.py, focus_peer.py, sfa_peer.py)."""
import time

import torch


def median_ms(fn, reps, warmup=3, device="cuda"):
    """Median over `reps` calls of fn after `warmup` untimed ones, in ms: CUDA events around each
    call on the GPU; wall-clock (rough, for checking a script) on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device == "cpu":
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
            continue
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[reps // 2]
