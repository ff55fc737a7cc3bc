#!/usr/bin/env python3
"""PyTorch peer for bench_train: training throughput of GPT-2 or LLaMA-block models, eager and
torch.compile.

Own minimal models (no `transformers`), what a PyTorch user would write for speed: flash SDPA
(causal; GQA by `enable_gqa`), bf16 autocast, fused AdamW, the vocabulary padded as attnlab pads
it (a multiple of 128), random data, the shapes of bench_train's recipe.
- `--model gpt2` (default: GPT-2 124M): LayerNorm, GELU (tanh), learned positions, biases, tied head.
- `--model llama` (default: recipes/llama-124m-dense.yaml's shape): RMSNorm, SwiGLU, RoPE
  (transformers' rotate_half convention), no biases; `--kv-heads` for GQA, `--untied` for an
  untied head. The shape flags give other sizes, e.g. LLaMA 3.2 1B:
  `--model llama --layers 16 --embd 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048`.
Prints tok/s, ms/step and peak memory, then "RESULT torch_peer mode=... tok_s=... mem_gib=...".

  python3 scripts/bench/torch_train_peer.py [--model gpt2|llama] [--batch 64] [--seq 1024]
      [--steps 10] [--modes eager,compile] [shape flags]
"""
import argparse
import gc
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v):
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)


class GPT2Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C = a.embd
        self.H = a.heads
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, a.ffn), nn.Linear(a.ffn, C)

    def forward(self, x, rope):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        sh = lambda t: t.view(B, T, self.H, C // self.H).transpose(1, 2)
        y = attention(sh(q), sh(k), sh(v))
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def rotate(t, cos, sin):  # transformers' rotate_half convention, the tables in t's dtype as there
    cos, sin = cos.to(t.dtype), sin.to(t.dtype)
    t1, t2 = t.chunk(2, dim=-1)
    return t * cos + torch.cat((-t2, t1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, self.H, self.KV = a.embd, a.heads, a.kv_heads
        self.D = C // a.heads
        self.norm_1, self.norm_2 = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, (self.H + 2 * self.KV) * self.D, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * a.ffn, bias=False)
        self.down = nn.Linear(a.ffn, C, bias=False)

    def forward(self, x, rope):
        B, T, C = x.shape
        cos, sin = rope
        q, k, v = self.qkv(self.norm_1(x)).split([self.H * self.D, self.KV * self.D, self.KV * self.D], 2)
        q = rotate(q.view(B, T, self.H, self.D).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, self.KV, self.D).transpose(1, 2), cos, sin)
        y = attention(q, k, v.view(B, T, self.KV, self.D).transpose(1, 2))
        x = x + self.o(y.transpose(1, 2).contiguous().view(B, T, C))
        gate, up = self.gate_up(self.norm_2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        llama = a.model == "llama"
        self.wte = nn.Embedding(a.vocab_padded, a.embd)
        self.wpe = None if llama else nn.Embedding(a.seq, a.embd)
        self.h = nn.ModuleList((LlamaBlock if llama else GPT2Block)(a) for _ in range(a.layers))
        self.norm_f = nn.RMSNorm(a.embd, eps=1e-5) if llama else nn.LayerNorm(a.embd)
        self.head = nn.Linear(a.embd, a.vocab_padded, bias=False) if a.untied else None
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        D = a.embd // a.heads
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        rope = (self.cos[:T], self.sin[:T])
        for b in self.h:
            x = b(x, rope)
        logits = F.linear(self.norm_f(x), (self.wte if self.head is None else self.head).weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def bench(a, mode):
    torch.manual_seed(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = Model(a).cuda()
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    B, T = a.batch, a.seq
    x = torch.randint(0, a.vocab, (B, T), device="cuda")
    y = torch.randint(0, a.vocab, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t_warm = time.time() - t0
    t0 = time.time()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    torch.cuda.synchronize()
    dt = (time.time() - t0) / a.steps
    mem = torch.cuda.max_memory_allocated() / 2**30
    tok_s = B * T / dt
    n = sum(p.numel() for p in model.parameters())
    print(f"torch {mode:8s} | {a.model} {n / 1e6:.1f}M params | B {B} T {T} | {tok_s:,.0f} tok/s | "
          f"{dt * 1e3:.2f} ms/step | peak {mem:.2f} GiB | warm-up {t_warm:.1f} s | loss {loss.item():.3f}", flush=True)
    print(f"RESULT torch_peer mode={mode} model={a.model} mb={B} tok_s={tok_s:.0f} ms={dt * 1e3:.3f} "
          f"mem_gib={mem:.2f}", flush=True)
    del model, opt, fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=0, help="LLaMA: key/value heads (0: --heads)")
    ap.add_argument("--ffn", type=int, default=0,
                    help="MLP width (0: 4 x embd for gpt2; LLaMA's rule for llama: 8/3 x embd rounded up to 256)")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--untied", action="store_true", help="an untied output head")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    a.ffn = a.ffn or (4 * a.embd if a.model == "gpt2" else (8 * a.embd // 3 + 255) // 256 * 256)
    a.vocab_padded = (a.vocab + 127) // 128 * 128
    if a.model == "gpt2" and (a.kv_heads != a.heads or a.untied):
        ap.error("--kv-heads and --untied are LLaMA-block options")
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for m in a.modes.split(","):
        try:
            bench(a, m)
        except torch.cuda.OutOfMemoryError:  # the next mode may fit (eager keeps more than compile)
            print(f"torch {m:8s} | out of memory at B {a.batch} T {a.seq}", flush=True)
            print(f"RESULT torch_peer mode={m} model={a.model} mb={a.batch} oom=1", flush=True)
        gc.collect()  # the failed mode's model and optimizer, held by the exception until here
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
