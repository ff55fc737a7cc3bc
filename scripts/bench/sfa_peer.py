#!/usr/bin/env python3
"""PyTorch peer for SFA (issue 15; docs/sfa.md): the paper-style sparse feature attention a PyTorch
user would write. An oracle and a yardstick only; attnlab never imports it.

Per head vector of q and k, keep the k coordinates of largest magnitude (torch.topk on |x|, then
scatter the kept values into zeros: q~, k~), then flash SDPA (causal) on q~, k~ and the dense v.
The gather/scatter is differentiable, so the backward is the straight-through one of attnlab:
gradients reach only the selected coordinates of q and k, dv dense. Timed: SFA forward
(selection + SDPA) and forward+backward, against dense SDPA forward and forward+backward on the
same inputs; also the selection alone. One GPU, bf16, batch 1, causal; D = 64 with 12 heads and
k 4, 8, 16; D = 128 with 8 heads and k 8, 16, 32; T = 4K, 16K, 64K, 128K.
Ties: torch.topk does not promise attnlab's rule (lowest index); the timing does not depend on it.

Validation (exit 1 on failure), at the smallest T (<= 4096), on inputs redrawn until no row has a
tie at its k-th largest |x| (bf16 ties are common; a tie makes the selection ambiguous): every
row of q~, k~ holds exactly k nonzeros, the smallest kept |x| >= the largest dropped |x|; the
output and dq, dk, dv against an fp32 reference that selects by a magnitude threshold (another
path than topk + scatter); dq, dk exactly zero off the selection. Tolerance: 2x the error
against the same fp32 reference of bf16 flash SDPA on the threshold-masked q, k (the same
precision; forward and each gradient).

speedup = dense ms / SFA ms (> 1: faster than dense). SDPA on q~, k~ does the dense work, so this
peer cannot be faster than dense: it is the baseline FlashSFA must beat.

  python3 scripts/bench/sfa_peer.py [--quick] [--csv FILE] [--ts 4096,16384]
      [--configs 12x64:4/8/16,8x128:8/16/32] [--device cpu]
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F

import peer_timing

DEV = "cuda"  # --device


def median_ms(fn, reps, warmup=3):
    return peer_timing.median_ms(fn, reps, warmup, DEV)


def reps_for(T):
    return 10 if T <= 16384 else 5


def sparsify(x, k):
    """Keep the k largest |x| per head vector (last dim), zeros elsewhere; differentiable."""
    idx = x.abs().topk(k, dim=-1).indices
    return torch.zeros_like(x).scatter(-1, idx, x.gather(-1, idx))


def sdpa_flash(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sfa(q, k, v, kk):
    return sdpa_flash(sparsify(q, kk), sparsify(k, kk), v)


def causal_reference(q, k, v, dout):
    """fp32 causal attention and its gradients, one head at a time (memory)."""
    outs, grads = [], [[], [], []]
    T = q.shape[2]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    for h in range(q.shape[1]):
        qh, kh, vh = (x[:, h].detach().float().requires_grad_() for x in (q, k, v))
        s = (qh @ kh.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        o = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ vh
        for acc, g in zip(grads, torch.autograd.grad(o, (qh, kh, vh), dout[:, h].float())):
            acc.append(g)
        outs.append(o.detach())
    return [torch.stack(x, dim=1) for x in [outs] + grads]


def threshold_mask(x, k):
    """Selection by threshold: |x| >= the k-th largest |x| of its row (equals topk without ties)."""
    a = x.detach().float().abs()
    kth = a.sort(dim=-1, descending=True).values[..., k - 1:k]
    return a >= kth


def tie_free(x, k, gen):
    """x with every row redrawn until its k-th largest |x| is nonzero and strictly above the
    (k+1)-th, so the selection is unique (bf16 has ties often enough to matter)."""
    x = x.clone()
    while True:
        a = x.float().abs().sort(dim=-1, descending=True).values
        bad = a[..., k - 1] == 0
        if k < x.shape[-1]:
            bad |= a[..., k - 1] == a[..., k]
        if not bad.any():
            return x
        n = int(bad.sum())
        x[bad] = torch.randn(n, x.shape[-1], device=x.device, generator=gen).to(x.dtype)


def randn_bf16(shape, gen, requires_grad=False):
    """fp32 normal rounded to bf16 (a bf16 randn may give exact zeros)."""
    x = torch.randn(shape, device=DEV, generator=gen).to(torch.bfloat16)
    return x.requires_grad_(requires_grad)


class Report:
    COLS = ["method", "H", "D", "k", "T", "ms", "dense_ms", "speedup", "max_err", "tol", "status"]

    def __init__(self, csv_path):
        self.out = open(csv_path, "w") if csv_path else None
        self.failures = []
        if self.out:
            self.out.write(",".join(self.COLS) + "\n")
        print(f"{'method':<12} {'HxD':>6} {'k':>3} {'T':>7} {'ms':>10} {'dense ms':>10} "
              f"{'speedup':>8} {'max err':>9} {'tol':>9}  status")

    def row(self, method, H, D, k, T, ms=None, dense_ms=None, err=None, tol=None, status="ok"):
        sp = dense_ms / ms if ms and dense_ms else None
        f = lambda x, spec: "" if x is None else format(x, spec)
        print(f"{method:<12} {f'{H}x{D}':>6} {k:>3} {T:>7} {f(ms, '.3f'):>10} "
              f"{f(dense_ms, '.3f'):>10} {f(sp, '.2f'):>8} {f(err, '.2e'):>9} {f(tol, '.2e'):>9}"
              f"  {status}", flush=True)
        if self.out:
            vals = [method, H, D, k, T, f(ms, ".4f"), f(dense_ms, ".4f"), f(sp, ".3f"),
                    f(err, ".3e"), f(tol, ".3e"), status.replace(",", ";")]
            self.out.write(",".join(str(x) for x in vals) + "\n")
            self.out.flush()

    def check(self, name, ok, detail=""):
        if not ok:
            self.failures.append(f"{name} {detail}".strip())
        return ok


def validate(report, H, D, T, kk, gen):
    """Checks the sparsification and SFA's output and gradients at the same precision as dense,
    on inputs of its own without ties at the selection boundary (where the selection is unique).
    Returns (max output error, its tolerance, status)."""
    q, k = (tie_free(randn_bf16((1, H, T, D), gen), kk, gen).requires_grad_() for _ in range(2))
    v, dout = randn_bf16((1, H, T, D), gen, True), randn_bf16((1, H, T, D), gen)
    name = f"sfa {H}x{D} k={kk} T={T}"
    for x, role in ((q, "q"), (k, "k")):
        xs = sparsify(x.detach(), kk)
        nnz = (xs != 0).sum(-1)
        kept = torch.where(xs != 0, x.detach().abs(), torch.full_like(x.detach(), float("inf")))
        dropped = torch.where(xs == 0, x.detach().abs(), torch.zeros_like(x.detach()))
        report.check(f"{name}: {role}~ rows with != {kk} nonzeros: {(nnz != kk).sum().item()}",
                     bool((nnz == kk).all()))
        report.check(f"{name}: {role}~ dropped a larger |x| than it kept",
                     bool((kept.amin(-1) >= dropped.amax(-1)).all()))
    ins = (q, k, v)
    mq, mk = threshold_mask(q, kk), threshold_mask(k, kk)
    ref = causal_reference(q.detach() * mq, k.detach() * mk, v, dout)
    ref[1], ref[2] = ref[1] * mq, ref[2] * mk  # straight-through: the selected coordinates only
    # the same precision: bf16 flash SDPA on the threshold-masked q, k (no topk, no scatter)
    same = [sdpa_flash(q * mq, k * mk, v)]
    same += list(torch.autograd.grad(same[0], ins, dout))
    tols = [2.0 * (g.float() - r).abs().max().item() + 1e-6 for g, r in zip(same, ref)]
    got = [sfa(q, k, v, kk)]
    got += list(torch.autograd.grad(got[0], ins, dout))
    names = ["out", "dq", "dk", "dv"]
    errs = [(g.float() - r).abs().max().item() for g, r in zip(got, ref)]
    ok = True
    for n, e, t in zip(names, errs, tols):
        ok &= report.check(f"{name}: {n} max error {e:.3e} > tolerance {t:.3e}", e <= t)
    for g, m, n in ((got[1], mq, "dq"), (got[2], mk, "dk")):
        ok &= report.check(f"{name}: {n} nonzero off the selection", bool((g[~m] == 0).all()))
    print(f"    validation {H}x{D} k={kk} T={T}: " +
          ", ".join(f"{n} {e:.2e}/{t:.2e}" for n, e, t in zip(names, errs, tols)))
    return errs[0], tols[0], "ok, validated" if ok else "FAIL"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="--quick: T 4K and 16K only.")
    p.add_argument("--quick", action="store_true", help="T 4K and 16K only")
    p.add_argument("--csv", metavar="FILE", help="write every row to FILE as CSV")
    p.add_argument("--ts", help="sequence lengths, comma-separated "
                   "(default 4096,16384,65536,131072)")
    p.add_argument("--configs", default="12x64:4/8/16,8x128:8/16/32",
                   help="HxD:k/k/... per head config (default 12x64:4/8/16,8x128:8/16/32)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: check the script without a GPU (slow; rough wall-clock times)")
    p.add_argument("--validate-max-t", type=int, default=4096,
                   help="validate at the smallest T if it is at most this (default 4096)")
    a = p.parse_args(argv)
    try:
        a.ts = [int(x) for x in a.ts.split(",")] if a.ts else \
            ([4096, 16384] if a.quick else [4096, 16384, 65536, 131072])
        assert a.ts and min(a.ts) >= 1
    except (ValueError, AssertionError):
        p.error(f"--ts: expected positive integers, comma-separated, got {a.ts!r}")
    try:
        cfgs = []
        for c in a.configs.split(","):
            hd, ks = c.split(":")
            H, D = (int(x) for x in hd.split("x"))
            kl = [int(x) for x in ks.split("/")]
            assert H > 0 and D in (64, 128) and all(1 <= x <= D for x in kl)
            cfgs.append((H, D, kl))
        a.configs = cfgs
    except (ValueError, AssertionError):
        p.error("--configs: expected HxD:k/k/... with D 64 or 128 and 1 <= k <= D, "
                f"got {a.configs!r}")
    return a


def main(argv):
    global DEV
    args = parse_args(argv)
    DEV = args.device
    if DEV == "cuda" and not torch.cuda.is_available():
        print("sfa_peer: needs a CUDA device (none found)")
        return 1
    name = torch.cuda.get_device_name() if DEV == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}, bf16, batch 1, causal; "
          f"speedup = dense SDPA ms / SFA ms")
    report = Report(args.csv)
    gen = torch.Generator(device=DEV)
    t_val = min(args.ts)
    for H, D, kl in args.configs:
        for T in sorted(args.ts):
            gen.manual_seed(1000 * T + D)
            reps = reps_for(T)

            def case():
                q, k, v = (randn_bf16((1, H, T, D), gen, True) for _ in range(3))
                dout = randn_bf16((1, H, T, D), gen)
                ins = (q, k, v)
                with torch.no_grad():
                    d_f = median_ms(lambda: sdpa_flash(q, k, v), reps)
                d_fb = median_ms(lambda: torch.autograd.grad(sdpa_flash(q, k, v), ins, dout), reps)
                report.row("dense_fwd", H, D, "", T, ms=d_f, dense_ms=d_f)
                report.row("dense_fwdbwd", H, D, "", T, ms=d_fb, dense_ms=d_fb)
                for kk in kl:
                    def sparse_case():
                        err = tol = None
                        st = "ok"
                        if T == t_val and T <= args.validate_max_t:
                            err, tol, st = validate(report, H, D, T, kk, gen)
                        with torch.no_grad():
                            sel = median_ms(lambda: (sparsify(q, kk), sparsify(k, kk)), reps)
                            f = median_ms(lambda: sfa(q, k, v, kk), reps)
                        fb = median_ms(lambda: torch.autograd.grad(sfa(q, k, v, kk), ins, dout),
                                       reps)
                        report.row("select_qk", H, D, kk, T, ms=sel, dense_ms=d_f)
                        report.row("sfa_fwd", H, D, kk, T, ms=f, dense_ms=d_f, err=err, tol=tol,
                                   status=st)
                        report.row("sfa_fwdbwd", H, D, kk, T, ms=fb, dense_ms=d_fb, status=st)

                    peer_timing.guarded(report, ("sfa_fwd", H, D, kk, T), sparse_case)

            peer_timing.guarded(report, ("dense_fwd", H, D, "", T), case)
    return peer_timing.finish(report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
