"""Timing and run helpers shared by the PyTorch peer scripts (sdpa_peer.py, focus_peer.py,
sfa_peer.py)."""
import time
import traceback

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


def guarded(report, key, fn):
    """Runs fn(); an OOM or an error of this PyTorch becomes a 'skipped: reason' row
    (report.row(*key, status=...))."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - any failure of one case must not end the sweep
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]
        if isinstance(e, torch.cuda.OutOfMemoryError):
            reason = "out of memory"
        elif not isinstance(e, (RuntimeError, NotImplementedError)):
            traceback.print_exc()
        report.row(*key, status=f"skipped: {reason}")
        return None
    finally:
        torch.cuda.empty_cache()


def finish(report):
    """Closes the report's CSV and prints its validation failures: the script's exit code."""
    if report.out:
        report.out.close()
    if report.failures:
        print(f"VALIDATION FAILED ({len(report.failures)}):\n  " + "\n  ".join(report.failures))
        return 1
    print("all validations passed")
    return 0
