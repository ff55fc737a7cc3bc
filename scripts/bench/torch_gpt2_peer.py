#!/usr/bin/env python3
"""PyTorch peer for bench_train: GPT-2 124M training throughput, eager and torch.compile.

Own minimal GPT-2 (no `transformers`): flash SDPA (causal), bf16 autocast, fused AdamW, tied
embeddings, vocabulary padded to 50304, random data, the same shapes as bench_train.
Prints tok/s, ms/step and peak memory, then "RESULT torch_peer mode=... tok_s=... mem_gib=...".

  python3 scripts/bench/torch_gpt2_peer.py [--batch 64] [--seq 1024] [--steps 10] [--modes eager,compile]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        sh = lambda t: t.view(B, T, self.H, C // self.H).transpose(1, 2)
        y = F.scaled_dot_product_attention(sh(q), sh(k), sh(v), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L=12, C=768, H=12, V=50304, block=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(block, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def bench(mode, B, T, steps, warmup):
    torch.manual_seed(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = GPT2().cuda()
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    x = torch.randint(0, 50257, (B, T), device="cuda")
    y = torch.randint(0, 50257, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t0 = time.time()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t_warm = time.time() - t0
    t0 = time.time()
    for _ in range(steps):
        loss = step()
    loss.item()
    torch.cuda.synchronize()
    dt = (time.time() - t0) / steps
    mem = torch.cuda.max_memory_allocated() / 2**30
    tok_s = B * T / dt
    print(f"torch {mode:8s} | B {B} T {T} | {tok_s:,.0f} tok/s | {dt * 1e3:.2f} ms/step | peak {mem:.2f} GiB "
          f"| warm-up {t_warm:.1f} s | loss {loss.item():.3f}", flush=True)
    print(f"RESULT torch_peer mode={mode} mb={B} tok_s={tok_s:.0f} ms={dt * 1e3:.3f} mem_gib={mem:.2f}", flush=True)
    del model, opt, fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for m in a.modes.split(","):
        bench(m, a.batch, a.seq, a.steps, a.warmup)


if __name__ == "__main__":
    main()
