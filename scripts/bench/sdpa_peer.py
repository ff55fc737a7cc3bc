"""Peer for bench_attention: PyTorch scaled_dot_product_attention (causal, bf16), same shapes and
FLOP counts (fwd 4*B*H*T*T*D/2, bwd 2.5x). Usage: python3 sdpa_peer.py [csv_out] [--gpt2]
(--gpt2 adds the GPT-2 124M training shape B=64 T=1024 H=12 D=64, as bench_attention does;
--shape=D:T runs only that sweep shape, for profilers: scripts/ncu_attention.sh)."""
import sys

import torch
import torch.nn.functional as F
from peer_timing import median_ms




def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    gpt2 = "--gpt2" in sys.argv[1:]
    only = [tuple(map(int, a[8:].split(":"))) for a in sys.argv[1:] if a.startswith("--shape=")]
    out = open(args[0], "w") if args else None
    if out:
        out.write("D,T,B,H,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,shape\n")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'D':>4} {'T':>6} {'B':>3} {'H':>3} {'fwd ms':>10} {'fwd TF/s':>10} "
          f"{'fwd+bwd ms':>12} {'fwd+bwd TF/s':>12}")
    shapes = [(D, T, 32768 // T, 2048 // D) for D in (64, 128) for T in (1024, 4096, 16384)
              if not only or (D, T) in only]
    if gpt2:
        shapes.append((64, 1024, 64, 12))
    for i, (D, T, B, H) in enumerate(shapes):
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * B * H * T * T * D / 2
        reps = 5 if T >= 16384 else 10

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwdbwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), dout)  # no accumulation into .grad

        f_ms = median_ms(fwd, reps)
        fb_ms = median_ms(fwdbwd, reps)
        f_tf = flops / (f_ms * 1e-3) / 1e12
        fb_tf = 3.5 * flops / (fb_ms * 1e-3) / 1e12
        print(f"{D:>4} {T:>6} {B:>3} {H:>3} {f_ms:>10.3f} {f_tf:>10.1f} {fb_ms:>12.3f} "
              f"{fb_tf:>12.1f}")
        if out:
            shape = "gpt2" if gpt2 and i == len(shapes) - 1 else "sweep"
            out.write(f"{D},{T},{B},{H},{f_ms:.4f},{f_tf:.2f},{fb_ms:.4f},{fb_tf:.2f},{shape}\n")
        del q, k, v, dout
        torch.cuda.empty_cache()
    if out:
        out.close()


if __name__ == "__main__":
    main()
