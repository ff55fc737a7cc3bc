#!/usr/bin/env python3
"""PyTorch peers for Focus attention (issue 13, "Benchmarks"; docs/focus.md): what a PyTorch user
would run instead of attnlab's kernels. An oracle and a yardstick only; attnlab never imports it.

One GPU, bf16, batch 1, causal, local window w (128). Groups are shared by all heads (one
assignment per layer, as in attnlab). Per (heads x dim, T, K, top_k, groups):
  dense      SDPA causal, flash backend, forward (the denominator of every ratio)
  decomp     the paper's decomposition of hard routing (top_k 1 only): stable sort of the
             tokens by group (positions increase inside a group), gather q/k/v, ONE flash SDPA
             call PER GROUP, causal on the group-sorted tokens (with its log-sum-exp), plus masked
             local attention (keys with i - j <= w sharing no group with i; blocked fp32 einsum,
             w queries x 2w keys per block), merged by log-sum-exp in token order; routing, sort,
             gathers and the host read of the group sizes are inside the timing. top_k 2 is
             skipped: per-group SDPA counts a pair sharing two groups twice (flex_hard has it).
  flex_hard  FlexAttention (torch.compile'd), mask_mod = causal and (i - j <= w or shared
             group), token order, forward; the block mask is built once per case, outside the
             timing; T <= --flex-max-t (64K: the compiled block-mask build grows as T^2).
  soft_fwd / soft_fwdbwd (per heads x dim, T, K; groups do not change the cost):
             FlexAttention score_mod = score + log(a + eps) for i - j > w, a = g_i . g_j, g a
             soft assignment [T, K] (fp32, rows sum to 1) with gradients to q, k, v and g;
             forward and forward+backward, against dense SDPA forward / forward+backward.
Groups: "balanced" = iid random scores per token (uniform group use); "realistic" = Gaussian-
smoothed random scores over positions (correlation ~32 tokens): runs of nearby tokens per group.
Each token's groups are its top_k largest scores; the soft g is softmax(scores / 0.5).

Validation (exit 1 on failure), for every case with T <= 4096: decomp and flex_hard against an
fp32 masked dense reference (max err = the largest row error, max |out - ref| / max |ref| in a
row); soft at T = 1024 (or the T nearest it, if <= 4096) against an fp32 reference, forward and
the gradients of q, k, v, g. Each tolerance is 4x (hard) / 2x (soft) the error of a
same-precision reference: bf16 SDPA with the boolean mask (hard), the same math in bf16 (soft).

speedup = dense ms / method ms (> 1: faster than dense). A case that runs out of memory or that
this PyTorch cannot run prints "skipped: reason".

  python3 scripts/bench/focus_peer.py [--quick] [--long] [--csv FILE] [--ts 1024,4096]
      [--heads 12x64,8x128] [--ks 4,8] [--topks 1,2] [--groups balanced,realistic]
      [--window 128] [--soft-ks 8] [--soft-max-t N] [--flex-max-t N] [--device cpu]
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F

import peer_timing

GATE_EPS = 1e-6  # attnlab's gate_eps (docs/focus.md)
DEV = "cuda"  # --device


def median_ms(fn, reps, warmup=3):
    return peer_timing.median_ms(fn, reps, warmup, DEV)


def reps_for(T):
    return 10 if T <= 16384 else 5 if T <= 65536 else 3


def warmup_for(T):
    return 3 if T <= 16384 else 1  # one call compiles / warms; long calls take seconds


# ---------------------------------------------------------------- groups
def group_scores(T, K, kind, gen, device):
    """[T, K] fp32 scores; a token's groups are its top_k scores."""
    if kind == "balanced":
        return torch.randn(T, K, generator=gen, device=device)
    sigma, half = 32.0, 128  # realistic: smoothed over positions, unit variance
    x = torch.arange(-half, half + 1, device=device, dtype=torch.float32)
    kern = torch.exp(-0.5 * (x / sigma) ** 2)
    kern = (kern / kern.norm()).view(1, 1, -1)
    noise = torch.randn(K, 1, T + 2 * half, generator=gen, device=device)
    return F.conv1d(noise, kern).view(K, T).t().contiguous()


def hard_groups(scores, top_k):
    return scores.topk(top_k, dim=-1).indices.to(torch.int32)  # [T, top_k]


def shared_group(gq, gk):
    """gq [..., top_k], gk [..., top_k] int -> bool: the two tokens share at least one group."""
    s = torch.zeros(torch.broadcast_shapes(gq.shape[:-1], gk.shape[:-1]), dtype=torch.bool,
                    device=gq.device)
    for a in range(gq.shape[-1]):
        for b in range(gk.shape[-1]):
            s |= gq[..., a] == gk[..., b]
    return s


# ---------------------------------------------------------------- references (fp32 or bf16 math)
def hard_mask(grp, w):
    T = grp.shape[0]
    pos = torch.arange(T, device=grp.device)
    d = pos[:, None] - pos[None, :]
    return (d >= 0) & ((d <= w) | shared_group(grp[:, None, :], grp[None, :, :]))


def masked_reference(q, k, v, mask):
    """fp32 softmax attention under a [T, T] bool mask, one head at a time (memory)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        s = (q[:, h].float() @ k[:, h].float().transpose(-1, -2)) * scale
        out[:, h] = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v[:, h].float()
    return out


def soft_reference(q, k, v, g, w, dtype):
    """Soft additive gate in `dtype` math: logit s_ij + log(g_i.g_j + eps) for i - j > w."""
    T = q.shape[2]
    q, k, v, g = q.to(dtype), k.to(dtype), v.to(dtype), g.to(dtype)
    pos = torch.arange(T, device=q.device)
    d = pos[:, None] - pos[None, :]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    s = torch.where(d > w, s + torch.log(g @ g.t() + GATE_EPS), s)
    return torch.softmax(s.masked_fill(d < 0, float("-inf")), dim=-1) @ v


# ---------------------------------------------------------------- dense and the decomposition
def sdpa_flash(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_causal_lse(q, k, v):
    """Causal flash attention returning (out bf16, lse fp32 [B, H, L], natural log)."""
    if q.is_cuda:
        r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)
    else:
        r = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    return r[0], r[1][..., :q.shape[2]]


def local_other_group(q, k, v, grp, w, max_elems=1 << 28):
    """Attention over keys with 0 <= i - j <= w that share no group with i, in token order.
    Blocks of W = max(w, 1) queries see their own and the previous block's keys (2W); fp32.
    Returns (out fp32 [B, H, T, D], lse fp32 [B, H, T]; -inf and 0 where no such key)."""
    B, H, T, D = q.shape
    W = max(w, 1)
    nb = (T + W - 1) // W
    pad = nb * W - T
    scale = 1.0 / math.sqrt(D)

    def blocks(x, lead):  # [B, H, T, D] -> [B, H, nb + lead, W, D], zero blocks in front / pad
        x = F.pad(x, (0, 0, lead * W, pad))
        return x.view(B, H, nb + lead, W, D)

    qb = blocks(q, 0)
    kp, vp = blocks(k, 1), blocks(v, 1)
    gp = F.pad(grp.t().to(torch.int64), (W, pad), value=-1).t()  # [W + nb W, top_k]
    qpos = torch.arange(nb * W, device=q.device).view(nb, W, 1)
    kpos = (torch.arange(2 * W, device=q.device).view(1, 1, 2 * W)
            + (torch.arange(nb, device=q.device).view(nb, 1, 1) - 1) * W)
    dist = qpos - kpos
    gq = F.pad(grp.t().to(torch.int64), (0, pad), value=-2).t().view(nb, W, 1, -1)
    gk = gp.unfold(0, 2 * W, W).permute(0, 2, 1).reshape(nb, 1, 2 * W, -1)[:nb]
    mask = (dist >= 0) & (dist <= w) & (kpos >= 0) & (kpos < T) & ~shared_group(gq, gk)
    out = torch.empty(B, H, nb, W, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, nb, W, dtype=torch.float32, device=q.device)
    step = max(1, max_elems // (B * H * W * 2 * W))
    for b0 in range(0, nb, step):
        b1 = min(nb, b0 + step)
        kk = torch.cat([kp[:, :, b0:b1], kp[:, :, b0 + 1:b1 + 1]], dim=3).float()
        vv = torch.cat([vp[:, :, b0:b1], vp[:, :, b0 + 1:b1 + 1]], dim=3).float()
        s = torch.einsum("bhnqd,bhnkd->bhnqk", qb[:, :, b0:b1].float(), kk) * scale
        s = s.masked_fill(~mask[b0:b1], float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        l = p.sum(dim=-1, keepdim=True)
        out[:, :, b0:b1] = (p @ vv) / l.clamp_min(1e-30)
        lse[:, :, b0:b1] = (m + torch.log(l)).squeeze(-1)  # log 0 = -inf: no key
    return out.view(B, H, nb * W, D)[:, :, :T], lse.view(B, H, nb * W)[:, :, :T]


def decomposition(q, k, v, grp, K, w):
    """Paper-style hard routing, top_k 1: per-group causal flash SDPA on group-sorted tokens +
    local attention over other-group keys, log-sum-exp merge, back in token order."""
    g = grp[:, 0].to(torch.int64)
    perm = torch.sort(g, stable=True).indices
    sizes = torch.bincount(g, minlength=K).tolist()  # host read: one sync
    qs, ks, vs = q[:, :, perm], k[:, :, perm], v[:, :, perm]
    o_in = torch.empty_like(qs)
    lse_in = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    start = 0
    for n in sizes:
        if n:
            o, l = sdpa_causal_lse(qs[:, :, start:start + n], ks[:, :, start:start + n],
                                   vs[:, :, start:start + n])
            o_in[:, :, start:start + n], lse_in[:, :, start:start + n] = o, l
        start += n
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    o_in, lse_in = o_in[:, :, inv].float(), lse_in[:, :, inv]
    o_loc, lse_loc = local_other_group(q, k, v, grp, w)
    m = torch.maximum(lse_in, lse_loc)  # lse_in is finite: a token attends itself
    a, b = torch.exp(lse_in - m), torch.exp(lse_loc - m)
    return ((o_in * a[..., None] + o_loc * b[..., None]) / (a + b)[..., None]).to(q.dtype)


# ---------------------------------------------------------------- FlexAttention
class Flex:
    """FlexAttention, torch.compile'd on CUDA (eager on the CPU, which only checks the script).
    Captured tensors are indexed as 1-D columns (col[q_idx]): a 2-D gather inside a mask_mod or
    score_mod does not trace under vmap / lower in inductor."""

    def __init__(self, compiled):
        from torch.nn.attention import flex_attention as fa
        import torch._dynamo
        # one compiled kernel per shape / mask: keep them all (the default limit of 8 would make
        # later cases fall back to the eager path, which materialises T x T)
        torch._dynamo.config.cache_size_limit = 1024
        if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
            torch._dynamo.config.accumulated_cache_size_limit = 4096
        self.fa = fa
        self.compiled = compiled
        attn = fa.flex_attention
        self.attn = torch.compile(attn, dynamic=False) if compiled else attn

    def hard_block_mask(self, grp, w, T):
        cols = grp.t().contiguous().unbind(0)  # top_k columns [T]

        def mask_mod(b, h, qi, kj):
            same = cols[0][qi] == cols[0][kj]
            for a in range(len(cols)):
                for c in range(len(cols)):
                    if a or c:
                        same = same | (cols[a][qi] == cols[c][kj])
            return (kj <= qi) & ((qi - kj <= w) | same)

        return self.block_mask(mask_mod, T, grp.device)

    def causal_block_mask(self, T, device):
        return self.block_mask(lambda b, h, qi, kj: kj <= qi, T, device)

    def block_mask(self, mask_mod, T, device):
        try:
            return self.fa.create_block_mask(mask_mod, None, None, T, T, device=device,
                                             _compile=self.compiled)
        except TypeError:  # a torch without the _compile argument
            return self.fa.create_block_mask(mask_mod, None, None, T, T, device=device)

    def soft_score_mod(self, cols, w):
        """cols: the K columns [T] of the soft assignment g, leaves that require grad (captured
        buffers with gradients, as in FlexAttention's bias examples; built once per case)."""

        def score_mod(score, b, h, qi, kj):
            a = cols[0][qi] * cols[0][kj]
            for c in range(1, len(cols)):
                a = a + cols[c][qi] * cols[c][kj]
            return torch.where(qi - kj > w, score + torch.log(a + GATE_EPS), score)

        return score_mod


# ---------------------------------------------------------------- the run
class Report:
    COLS = ["method", "H", "D", "T", "K", "top_k", "groups", "ms", "dense_ms", "speedup",
            "max_err", "tol", "status"]

    def __init__(self, csv_path):
        self.out = open(csv_path, "w") if csv_path else None
        self.failures = []
        if self.out:
            self.out.write(",".join(self.COLS) + "\n")
        print(f"{'method':<12} {'HxD':>6} {'T':>8} {'K':>2} {'tk':>2} {'groups':<10} {'ms':>10} "
              f"{'dense ms':>10} {'speedup':>8} {'max err':>9} {'tol':>9}  status")

    def row(self, method, H, D, T, K="", top_k="", groups="", ms=None, dense_ms=None, err=None,
            tol=None, status="ok"):
        sp = dense_ms / ms if ms and dense_ms else None
        f = lambda x, spec: "" if x is None else format(x, spec)
        print(f"{method:<12} {f'{H}x{D}':>6} {T:>8} {K:>2} {top_k:>2} {groups:<10} "
              f"{f(ms, '.3f'):>10} {f(dense_ms, '.3f'):>10} {f(sp, '.2f'):>8} {f(err, '.2e'):>9} "
              f"{f(tol, '.2e'):>9}  {status}", flush=True)
        if self.out:
            vals = [method, H, D, T, K, top_k, groups, f(ms, ".4f"), f(dense_ms, ".4f"),
                    f(sp, ".3f"), f(err, ".3e"), f(tol, ".3e"), status.replace(",", ";")]
            self.out.write(",".join(str(x) for x in vals) + "\n")
            self.out.flush()

    def check(self, name, err, tol):
        if not err <= tol:  # NaN fails too
            self.failures.append(f"{name}: max error {err:.3e} > tolerance {tol:.3e}")
            return "FAIL"
        return "ok, validated"


def row_error(out, ref):
    """max over rows of max |out - ref| / max |ref| in that row: rows far from the window hold
    small outputs (averages of many values), so an absolute maximum would be set by the first
    rows (dense causal in every case) and hide errors in the routed ones."""
    return ((out.float() - ref).abs().amax(-1) / ref.abs().amax(-1).clamp_min(1e-30)).max().item()


def hard_tolerance(q, k, v, mask, ref):
    """4x the row error of bf16 SDPA under the same boolean mask (fp32 accumulation, one rounding
    of the output) against the fp32 reference: the decomposition rounds twice (per-group output,
    final output) and sums in another order."""
    return 4.0 * row_error(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), ref) + 1e-6


def run_hard_cases(args, report, flex, H, D, T, dense_ms, gen):
    dev = DEV
    q, k, v = (torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    reps = reps_for(T)
    for K in args.ks:
        for kind in args.groups:
            scores = group_scores(T, K, kind, gen, dev)
            for top_k in args.topks:
                key = (H, D, T, K, top_k, kind)
                if top_k > K:
                    report.row("decomp", *key, status=f"skipped: top_k {top_k} > K {K}")
                    continue
                grp = hard_groups(scores, top_k)
                ref = tol = None
                if T <= args.validate_max_t:
                    mask = hard_mask(grp, args.window)
                    ref = masked_reference(q, k, v, mask)
                    tol = hard_tolerance(q, k, v, mask, ref)
                    del mask

                def decomp_case():
                    out = decomposition(q, k, v, grp, K, args.window)
                    err = row_error(out, ref) if ref is not None else None
                    ms = median_ms(lambda: decomposition(q, k, v, grp, K, args.window), reps,
                                   warmup_for(T))
                    st = report.check(f"decomp {key}", err, tol) if err is not None else "ok"
                    report.row("decomp", *key, ms=ms, dense_ms=dense_ms, err=err, tol=tol,
                               status=st)

                if top_k == 1:
                    peer_timing.guarded(report, ("decomp",) + key, decomp_case)
                else:
                    report.row("decomp", *key, status="skipped: per-group SDPA counts a pair "
                               "sharing two groups twice (top_k 1 only)")

                def flex_case():
                    bm = flex.hard_block_mask(grp, args.window, T)
                    run = lambda: flex.attn(q, k, v, block_mask=bm)
                    out = run()
                    err = row_error(out, ref) if ref is not None else None
                    ms = median_ms(run, reps, warmup_for(T))
                    st = report.check(f"flex_hard {key}", err, tol) if err is not None else "ok"
                    report.row("flex_hard", *key, ms=ms, dense_ms=dense_ms, err=err, tol=tol,
                               status=st)

                if flex is None:
                    report.row("flex_hard", *key, status="skipped: no FlexAttention in this torch")
                elif T > args.flex_max_t:
                    why = f"skipped: T > --flex-max-t {args.flex_max_t}"
                    report.row("flex_hard", *key, status=why)
                else:
                    peer_timing.guarded(report, ("flex_hard",) + key, flex_case)
                del ref


def run_soft_cases(args, report, flex, H, D, T, dense_ms, dense_fb_ms, validate, gen):
    dev = DEV
    reps = reps_for(T)
    for K in args.soft_ks:
        key = (H, D, T, K, "", "soft")
        if flex is None or T > args.soft_max_t:
            why = "no FlexAttention in this torch" if flex is None else \
                f"T > --soft-max-t {args.soft_max_t}"
            for m in ("soft_fwd", "soft_fwdbwd"):
                report.row(m, *key, status=f"skipped: {why}")
            continue
        q, k, v = (torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, generator=gen,
                               requires_grad=True) for _ in range(3))
        g = torch.softmax(group_scores(T, K, "realistic", gen, dev) / 0.5, dim=-1).requires_grad_()
        dout = torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, generator=gen)
        ref = tols = None
        if validate:
            ins = (q, k, v, g)
            res = {}
            for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                o = soft_reference(q, k, v, g, args.window, dt)
                grads = torch.autograd.grad(o, ins, dout.to(dt))
                res[name] = [o.float()] + [x.float() for x in grads]
            tols = [2.0 * (a - b).abs().max().item() + 1e-6
                    for a, b in zip(res["bf16"], res["fp32"])]
            ref = res["fp32"]

        gcols = [g[:, c].detach().clone().requires_grad_() for c in range(K)]
        sm = flex.soft_score_mod(gcols, args.window)

        def soft_fwd_case():  # separate from the backward: an older torch may lack buffer grads
            bm = flex.causal_block_mask(T, dev)
            fwd = lambda: flex.attn(q.detach(), k.detach(), v.detach(), score_mod=sm,
                                    block_mask=bm)
            with torch.no_grad():
                ms = median_ms(fwd, reps, warmup_for(T))
            report.row("soft_fwd", *key, ms=ms, dense_ms=dense_ms)

        def soft_fwdbwd_case():
            bm = flex.causal_block_mask(T, dev)

            def fwdbwd():
                o = flex.attn(q, k, v, score_mod=sm, block_mask=bm)
                dq, dk, dv, *dg = torch.autograd.grad(o, [q, k, v] + gcols, dout)
                return [o, dq, dk, dv, torch.stack(dg, dim=1)]

            err = tol = None
            st = "ok"
            if ref is not None:
                got = fwdbwd()
                parts = [(gt.float() - r).abs().max().item() for gt, r in zip(got, ref)]
                names = ["out", "dq", "dk", "dv", "dg"]
                bad = [n for n, e, t in zip(names, parts, tols)
                       if report.check(f"soft {n} {key}", e, t) == "FAIL"]
                st = f"FAIL ({' '.join(bad)})" if bad else "ok, validated (out, dq, dk, dv, dg)"
                print(f"    soft validation T={T} K={K}: " + ", ".join(
                    f"{n} {e:.2e}/{t:.2e}" for n, e, t in zip(names, parts, tols)))
                err, tol = parts[0], tols[0]
            ms = median_ms(fwdbwd, reps, warmup_for(T))
            report.row("soft_fwdbwd", *key, ms=ms, dense_ms=dense_fb_ms, err=err, tol=tol,
                       status=st)

        peer_timing.guarded(report, ("soft_fwd",) + key, soft_fwd_case)
        peer_timing.guarded(report, ("soft_fwdbwd",) + key, soft_fwdbwd_case)
        del q, k, v, g, dout


def parse_args(argv):
    ints = lambda s: [int(x) for x in s.split(",") if x]
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Defaults: T 1K-256K (--long adds 1M), 12x64 and 8x128, "
                                "K 4,8, top_k 1,2, both group kinds. --quick: T 1K-16K, 12x64, "
                                "K 8, top_k 1.")
    p.add_argument("--quick", action="store_true",
                   help="T <= 16K, 12x64, K 8, top_k 1 (< 2 minutes)")
    p.add_argument("--long", action="store_true", help="add T = 1M (1048576)")
    p.add_argument("--csv", metavar="FILE", help="write every row to FILE as CSV")
    p.add_argument("--ts", type=ints, help="sequence lengths, comma-separated")
    p.add_argument("--heads", help="head configs HxD, comma-separated (default 12x64,8x128)")
    p.add_argument("--ks", type=ints, help="numbers of groups K (default 4,8)")
    p.add_argument("--topks", type=ints, help="top_k values (default 1,2)")
    p.add_argument("--groups", help="balanced,realistic (default both)")
    p.add_argument("--window", type=int, default=128, help="local window w (default 128)")
    p.add_argument("--soft-ks", type=ints, help="K for the soft-gate rows (default 8)")
    p.add_argument("--soft-max-t", type=int, default=65536,
                   help="longest T for the soft-gate rows (default 65536)")
    p.add_argument("--flex-max-t", type=int, default=65536,
                   help="longest T for FlexAttention hard-mask rows (default 65536)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: check the script without a GPU (slow; rough wall-clock times)")
    p.add_argument("--validate-max-t", type=int, default=4096,
                   help="validate hard routing against the fp32 masked reference up to this T")
    a = p.parse_args(argv)
    a.ts = a.ts or ([1024, 4096, 16384] if a.quick else
                    [1024, 4096, 16384, 65536, 262144] + ([1 << 20] if a.long else []))
    heads = a.heads or ("12x64" if a.quick else "12x64,8x128")
    try:
        a.heads = [tuple(int(x) for x in hd.split("x")) for hd in heads.split(",")]
        assert all(len(hd) == 2 and hd[0] > 0 and hd[1] in (64, 128) for hd in a.heads)
    except (ValueError, AssertionError):
        p.error(f"--heads: expected HxD pairs with D 64 or 128 (e.g. 12x64,8x128), got {heads!r}")
    a.ks = a.ks or ([8] if a.quick else [4, 8])
    a.topks = a.topks or ([1] if a.quick else [1, 2])
    a.soft_ks = a.soft_ks or [8]
    a.groups = (a.groups or "balanced,realistic").split(",")
    lists = (("--ts", a.ts), ("--ks", a.ks), ("--topks", a.topks), ("--soft-ks", a.soft_ks))
    for name, vals in lists:
        if not vals or min(vals) < 1:
            p.error(f"{name}: expected positive integers, got {vals}")
    if bad := [x for x in a.groups if x not in ("balanced", "realistic")]:
        p.error(f"--groups: expected balanced and/or realistic, got {bad}")
    if a.window < 0:
        p.error(f"--window: expected >= 0, got {a.window}")
    return a


def main(argv):
    global DEV
    args = parse_args(argv)
    DEV = args.device
    if DEV == "cuda" and not torch.cuda.is_available():
        print("focus_peer: needs a CUDA device (none found)")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 references and local part: fp32
    name = torch.cuda.get_device_name() if DEV == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}, bf16, batch 1, causal, "
          f"w = {args.window}; speedup = dense SDPA ms / method ms")
    try:
        flex = Flex(compiled=DEV == "cuda")
    except Exception as e:  # noqa: BLE001 - an old torch: the flex rows say why
        print(f"FlexAttention unavailable: {e}")
        flex = None
    report = Report(args.csv)
    gen = torch.Generator(device=DEV)
    soft_t = min(args.ts, key=lambda t: abs(t - 1024))  # the soft gate's validation length
    for H, D in args.heads:
        for T in args.ts:
            gen.manual_seed(1000 * T + D)
            reps = reps_for(T)
            dense = {}

            def dense_case():
                q, k, v = (torch.randn(1, H, T, D, device=DEV, dtype=torch.bfloat16,
                                       generator=gen, requires_grad=True) for _ in range(3))
                dout = torch.randn(1, H, T, D, device=DEV, dtype=torch.bfloat16, generator=gen)
                with torch.no_grad():
                    dense["fwd"] = median_ms(lambda: sdpa_flash(q, k, v), reps, warmup_for(T))
                report.row("dense", H, D, T, ms=dense["fwd"], dense_ms=dense["fwd"])
                if T > args.soft_max_t:  # only the soft rows need it
                    return
                fb = lambda: torch.autograd.grad(sdpa_flash(q, k, v), (q, k, v), dout)
                dense["fwdbwd"] = median_ms(fb, reps, warmup_for(T))
                report.row("dense_fwdbwd", H, D, T, ms=dense["fwdbwd"], dense_ms=dense["fwdbwd"])

            peer_timing.guarded(report, ("dense", H, D, T), dense_case)
            with torch.no_grad():
                run_hard_cases(args, report, flex, H, D, T, dense.get("fwd"), gen)
            run_soft_cases(args, report, flex, H, D, T, dense.get("fwd"), dense.get("fwdbwd"),
                           T == soft_t and T <= args.validate_max_t, gen)
    return peer_timing.finish(report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
