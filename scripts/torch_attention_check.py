#!/usr/bin/env python3
"""External oracle for attnlab's attention variants in a whole GPT-2 (PyTorch only as the reference).

Focus and SFA are written here again from their equations (issues 13 and 15; docs/focus.md and
docs/sfa.md, "The equations"), not from attnlab's code.
  Focus: cosine scores of W_g h against the centroids over tau, the log-domain Sinkhorn (causal
    or sequence scope) or a softmax assignment, the local band i - j <= w, the additive
    (exp(s) (a + eps)) or multiplicative (s sigmoid(lambda a + b)) soft gate on distant pairs,
    hard routing by each token's top_k groups (ties: the lower index), and for route_training
    hard the straight-through gradient min(exp(s - lse), 1) (dP - delta) to the affinity.
  SFA: each head's q and k keep their k largest-|x| coordinates (ties: the lower index), causal
    softmax attention on them, V dense, gradients masked by the selection; distillation adds
    lambda * mean over layers, heads and tokens of ||O~ - stopgrad(O_dense)||^2 in training.
It loads the weights that scripts/bench/gpt2_step_dump.cpp used and compares what that dump holds:
  loss, logits (last sequence)   the dump's first forward, evaluation mode (Focus: eval_routing)
  train_loss[0], grad.<param>    the training forward and backward (Focus: route_training; SFA:
                                 with the distillation term), loss scaled 1 / valid targets
The oracle runs in float64. The tolerance of each quantity comes from a same-precision reference
(STYLE.md): the oracle itself in float32 for an fp32 dump (tolerance 4x its error, floor 1e-5),
and for a bf16 dump the oracle with attnlab's bf16 policy (bf16 weights and activations; the
assignment and the softmax in float32) (tolerance 2x its error).

  python3 scripts/torch_attention_check.py --dump D.safetensors --model DIR/model.safetensors \
      --tokens batches.i32 --batch 2 --seq 256 --n-head 2 --vocab 512 --attention focus \
      [--local-window 128 --groups 8 --tau 0.1 --iterations 10 --top-k 2 --assign sinkhorn \
       --scope causal --gate additive --route-training soft --eval-routing hard]
      [--attention sfa --sfa-k 8 --distill 0]
Exit status 0 when every quantity is within its tolerance. scripts/attention_oracle_check.sh
runs the dumps (CPU and CUDA, fp32 and bf16, every Focus and SFA option) and this script on each.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_check import batches, read_safetensors, rel  # noqa: E402


def l2_normalise(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-12)


def assignment(h, w_g, centroids, o):
    """g [B, T, K] (rows sum to 1), computed in at least float32."""
    z = F.linear(h, w_g)
    work = torch.float64 if z.dtype == torch.float64 else torch.float32
    z, c = z.to(work), centroids.to(work)
    s = l2_normalise(z) @ l2_normalise(c).T / o.tau
    if o.assign == "softmax":
        return torch.softmax(s, -1)
    T, K = s.shape[1], s.shape[2]
    x = s
    for _ in range(o.iterations):
        if o.scope == "sequence":
            y = x - torch.logsumexp(x, 1, keepdim=True) + math.log(T / K)
        else:  # causal: token t's column over tokens <= t, mass (t + 1) / K
            t = torch.arange(T, device=s.device, dtype=work).view(1, T, 1)
            y = x - torch.logcumsumexp(x, 1) + torch.log((t + 1) / K)
        x = y - torch.logsumexp(y, -1, keepdim=True)
    return torch.exp(x)


def top_k_membership(g, top_k):
    """[B, T, K] 0/1: each token's top_k groups, ties to the lower index."""
    order = torch.sort(-g, dim=-1, stable=True).indices[..., :top_k]
    return torch.zeros_like(g).scatter_(-1, order, 1.0)


class StraightThrough(torch.autograd.Function):
    """Forward: the hard mask m. Backward: its gradient, exp(s - lse) (dP - delta) by autograd,
    bounded to min(exp(s - lse), 1) (dP - delta), passed to the affinity a."""

    @staticmethod
    def forward(ctx, a, m, e):
        ctx.save_for_backward(e)
        return m.clone()

    @staticmethod
    def backward(ctx, grad):
        (e,) = ctx.saved_tensors
        factor = torch.where(e > 1, 1.0 / e.clamp(min=1), torch.ones_like(e))
        return grad * factor, None, None


def focus_attention(q, k, v, g, o, routing):
    """q, k, v [B, H, T, D], g [B, T, K]; routing soft | hard (train: with straight-through)."""
    T, D = q.shape[2], q.shape[3]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q @ k.transpose(-1, -2)).to(work) / math.sqrt(D)
    i = torch.arange(T, device=q.device).view(T, 1)
    j = torch.arange(T, device=q.device).view(1, T)
    causal, local = j <= i, (i - j) <= o.local_window
    distant = causal & ~local
    g = g.to(work)
    a = (g @ g.transpose(-1, -2)).unsqueeze(1)  # [B, 1, T, T], shared by the heads
    neg = torch.tensor(float("-inf"), dtype=work, device=q.device)
    if routing == "soft":
        if o.gate == "additive":
            logit = torch.where(distant, s + torch.log(a + o.gate_eps), s)
        else:
            logit = torch.where(distant, s * torch.sigmoid(o.gate_scale * a + o.gate_bias), s)
        p = torch.softmax(torch.where(causal, logit, neg), -1)
    else:
        mem = top_k_membership(g, o.top_k)
        shared = ((mem @ mem.transpose(-1, -2)) > 0).unsqueeze(1)
        m = (causal & (local | shared)).to(work).expand(s.shape)  # per head: its own dm
        rowmax = torch.where(causal, s, neg).amax(-1, keepdim=True).detach()
        with torch.no_grad():
            lse = torch.logsumexp(torch.where(m > 0, s, neg), -1, keepdim=True)
            e = torch.exp(s - lse)
        if torch.is_grad_enabled():  # the distant pairs' mask stands in for their affinity
            m_st = StraightThrough.apply(a.expand_as(s), m, e)
            m = torch.where(distant, m_st, m)
        w = torch.exp(torch.where(causal, s - rowmax, neg)) * m
        p = w / w.sum(-1, keepdim=True)
    return (p.to(v.dtype) @ v)


def sparsify(x, kk):
    """x with all but its kk largest-|x| coordinates zeroed (ties: the lower index); the mask is
    a constant, so the gradient is the masked one."""
    order = torch.sort(-x.detach().abs().double(), dim=-1, stable=True).indices[..., :kk]
    return x * torch.zeros_like(x).scatter_(-1, order, 1.0)


def causal_attention(q, k, v):
    T, D = q.shape[2], q.shape[3]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q @ k.transpose(-1, -2)).to(work) / math.sqrt(D)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    p = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
    return p.to(v.dtype) @ v


def sfa_attention(q, k, v, o, train):
    """(out [B, H, T, D], distillation term of this layer or 0)."""
    kk = o.sfa_k or (q.shape[-1] + 7) // 8
    out = causal_attention(sparsify(q, kk), sparsify(k, kk), v)
    if not (train and o.distill > 0):
        return out, 0.0
    teacher = causal_attention(q, k, v).detach()
    per_head = ((out - teacher).double() ** 2).sum(-1)  # ||O~_h - O_h||^2 per (b, h, t)
    return out, per_head.mean()


class VariantGPT2(torch.nn.Module):
    """GPT-2 with attnlab's parameter names and layout and Focus or SFA attention in every layer."""

    def __init__(self, weights, o, dtype):
        super().__init__()
        self.o = o
        self.p = torch.nn.ParameterDict({n.replace(".", "__"): torch.nn.Parameter(w.to(dtype).clone())
                                         for n, w in weights.items()})
        self.n_layer = 1 + max(int(n.split(".")[1]) for n in weights if n.startswith("h."))

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, idx, targets, train):
        """(logits, cross-entropy, auxiliary loss: SFA's distillation in training, else 0)."""
        B, T = idx.shape
        o = self.o
        x = self.w("wte.weight")[idx] + self.w("wpe.weight")[:T]
        C = x.shape[-1]
        H = o.n_head
        aux = 0.0
        for l in range(self.n_layer):
            def g_(n):
                return self.w(f"h.{l}.{n}")
            h = F.layer_norm(x, (C,), g_("ln_1.weight"), g_("ln_1.bias"), 1e-5)
            qkv = F.linear(h, g_("attn.c_attn.weight"), g_("attn.c_attn.bias"))
            q, k, v = qkv.split(C, dim=-1)
            sh = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
            if o.attention == "focus":
                grp = assignment(h, g_("attn.focus.w_g"), g_("attn.focus.centroids"), o)
                y = focus_attention(sh(q), sh(k), sh(v), grp, o,
                                    o.route_training if train else o.eval_routing)
            else:
                y, term = sfa_attention(sh(q), sh(k), sh(v), o, train)
                aux = aux + o.distill * term / self.n_layer
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, g_("attn.c_proj.weight"), g_("attn.c_proj.bias"))
            h = F.layer_norm(x, (C,), g_("ln_2.weight"), g_("ln_2.bias"), 1e-5)
            h = F.gelu(F.linear(h, g_("mlp.c_fc.weight"), g_("mlp.c_fc.bias")), approximate="tanh")
            x = x + F.linear(h, g_("mlp.c_proj.weight"), g_("mlp.c_proj.bias"))
        x = F.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), 1e-5)
        logits = F.linear(x, self.w("wte.weight"))
        work = torch.float64 if logits.dtype == torch.float64 else torch.float32
        loss = F.cross_entropy(logits[..., :o.vocab].to(work).reshape(B * T, -1), targets.reshape(-1),
                               ignore_index=-1)
        return logits, loss, aux


def run(weights, o, dtype, x, y):
    """(eval logits of the last sequence, eval loss, train loss, {param: grad}) in `dtype`; the
    gradients are those of the training loss plus its auxiliary term."""
    model = VariantGPT2(weights, o, dtype)
    with torch.no_grad():
        lg, loss_eval, _ = model(x, y, train=False)
    _, loss_train, aux = model(x, y, train=True)
    (loss_train + aux).backward()
    grads = {n.replace("__", "."): p.grad.detach().double() for n, p in model.p.items()}
    return lg[-1].double(), loss_eval.item(), loss_train.item(), grads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--model", required=True, help="attnlab model.safetensors (the dump's weights)")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--attention", choices=["focus", "sfa"], default="focus")
    ap.add_argument("--sfa-k", type=int, default=0, help="0: ceil(head dim / 8)")
    ap.add_argument("--distill", type=float, default=0.0)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--local-window", type=int, default=128)
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--assign", choices=["sinkhorn", "softmax"], default="sinkhorn")
    ap.add_argument("--scope", choices=["causal", "sequence"], default="causal")
    ap.add_argument("--gate", choices=["additive", "multiplicative"], default="additive")
    ap.add_argument("--gate-eps", type=float, default=1e-6)
    ap.add_argument("--gate-scale", type=float, default=10.0)
    ap.add_argument("--gate-bias", type=float, default=-5.0)
    ap.add_argument("--route-training", choices=["soft", "hard"], default="soft")
    ap.add_argument("--eval-routing", choices=["soft", "hard"], default="hard")
    ap.add_argument("--label", default="")
    o = ap.parse_args()
    torch.manual_seed(0)

    weights, _ = read_safetensors(o.model)
    dump, meta = read_safetensors(o.dump)
    if o.attention == "focus":
        assert weights["h.0.attn.focus.centroids"].shape[0] == o.groups, "--groups differs from the model's K"
    x, y = batches(o.tokens, o.batch, o.seq)[0]
    bf16 = meta.get("dtype") == "bf16"

    lg64, le64, lt64, g64 = run(weights, o, torch.float64, x, y)
    if bf16:
        lgp, lep, ltp, gp = run(weights, o, torch.bfloat16, x, y)
        peer, factor, floor = "bf16 policy", 2.0, 0.0
    else:
        lgp, lep, ltp, gp = run(weights, o, torch.float32, x, y)
        peer, factor, floor = "float32", 4.0, 1e-5
    rows, ok = [], True

    def check(what, ours, peer_err):
        nonlocal ok
        tol = max(factor * peer_err, floor)
        good = ours <= tol
        ok &= good
        rows.append((what, ours, peer_err, tol, "ok" if good else "FAIL"))

    ev = f" ({o.eval_routing})" if o.attention == "focus" else ""
    tr = f" ({o.route_training})" if o.attention == "focus" else ""
    check(f"eval loss{ev}", abs(dump["loss"].item() - le64) / le64, abs(lep - le64) / le64)
    check(f"eval logits, last seq{ev}", rel(dump["logits"].double(), lg64), rel(lgp, lg64))
    check(f"train loss{tr}", abs(dump["train_loss"][0].item() - lt64) / lt64,
          abs(ltp - lt64) / lt64)
    worst = None
    for name, g in g64.items():
        eo, ep = rel(dump["grad." + name].double(), g), rel(gp[name], g)
        check("grad " + name, eo, ep)
        r = eo / max(ep, floor / factor, 1e-30)
        if worst is None or r > worst[0]:
            worst = (r, name)
    attn = [r for r in rows if ".focus." in r[0] or ".attn.c_attn.weight" in r[0]]
    shown = [r for r in rows if not r[0].startswith("grad ")] + attn + \
        [r for r in rows if r[0] == "grad " + worst[1] and r not in attn] + \
        [r for r in rows if r[4] == "FAIL" and r[0].startswith("grad ") and r not in attn][:10]
    print(f"== {o.label} dump {meta.get('dtype')} | eval loss ours {dump['loss'].item():.6f} oracle "
          f"{le64:.6f} | train loss ours {dump['train_loss'][0].item():.6f} oracle {lt64:.6f}")
    print(f"{'quantity':46s} {'ours vs f64':>12s} {peer:>12s} {'tol':>10s}")
    for r in shown:
        print(f"{r[0]:46s} {r[1]:12.3e} {r[2]:12.3e} {r[3]:10.3e} {r[4]}")
    n = sum(1 for r in rows if r[0].startswith("grad "))
    bad = sum(1 for r in rows if r[0].startswith("grad ") and r[4] == "FAIL")
    print(f"gradients: {n - bad}/{n} within tolerance (worst ratio to the {peer} error: {worst[1]})")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
