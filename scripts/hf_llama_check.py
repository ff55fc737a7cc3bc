#!/usr/bin/env python3
"""Hugging Face LLaMA / Mistral interop check against transformers (run on the GPU host; nothing
is downloaded). The oracle of attnlab's LLaMA block (RMSNorm, SwiGLU, RoPE, GQA) as a whole.

For each config (random weights, every tensor perturbed so that a swapped q/k/v or gate/up block,
a wrong rotation convention or a mis-tied head shows):
  1. LlamaForCausalLM / MistralForCausalLM(...).save_pretrained(DIR/hf);
  2. attnlab loads it through load_model_source (build/model_logits_dump) and its logits and loss
     are compared with transformers' on the same tokens (eager attention):
       fp32 (CUDA, TF32 off on both sides): max|ours - torch| / max|torch| <= 1e-4
       bf16: attnlab's bf16 error vs the fp32 reference <= 2x the error of transformers run in
             bf16 vs the same reference (a floor of 1e-3);
  3. `attnlab convert` hf -> attnlab -> hf: from_pretrained(converted) loads with no missing or
     unexpected keys and gives the original's logits exactly (the same fp32 weights).
Prints one PASS/FAIL line per check and exits 1 if any failed.

  python3 scripts/hf_llama_check.py --build build      # needs build/attnlab, build/model_logits_dump
"""
import argparse
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_interop_check import FAILURES, ours, rel, report, run, torch_logits  # noqa: E402


def perturb(model, seed):
    """Random values in every tensor (norm weights around 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.05 * noise)


def check_config(build, work, tag, arch, cfg_kwargs, B, T, seed):
    import transformers
    cfg_cls = getattr(transformers, arch + "Config")
    model_cls = getattr(transformers, arch + "ForCausalLM")
    torch.manual_seed(seed)
    cfg = cfg_cls(**cfg_kwargs)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg)
    perturb(model, seed)
    model = model.eval()
    d_hf = os.path.join(work, tag, "hf")
    model.save_pretrained(d_hf, safe_serialization=True)
    model = model.cuda()
    g = torch.Generator().manual_seed(seed + 1)
    toks = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=g, dtype=torch.int32)
    tok_path = os.path.join(work, tag, "tokens.i32")
    toks.numpy().tofile(tok_path)
    x, y = toks[:, :-1].long(), toks[:, 1:].long()
    ref_lg, ref_loss = torch_logits(model, x, y)
    bf_model = model_cls(cfg).eval()
    bf_model.load_state_dict(model.state_dict())
    bf_model = bf_model.to(torch.bfloat16).cuda()
    bf_lg, bf_loss = torch_logits(bf_model, x, y)
    del bf_model
    t_err, t_lerr = rel(bf_lg, ref_lg), abs(bf_loss - ref_loss) / abs(ref_loss)
    try:
        lg, loss = ours(build, d_hf, tok_path, B, T, "fp32", os.path.join(work, tag, "f32.st"))
        e, le = rel(lg, ref_lg), abs(loss - ref_loss) / abs(ref_loss)
        report(f"{tag} fp32 logits", e <= 1e-4, f"rel err {e:.2e} (tol 1e-4)")
        report(f"{tag} fp32 loss", le <= 1e-5, f"ours {loss:.6f} torch {ref_loss:.6f} rel err {le:.2e} (tol 1e-5)")
        lg, loss = ours(build, d_hf, tok_path, B, T, "bf16", os.path.join(work, tag, "bf16.st"))
        e, le = rel(lg, ref_lg), abs(loss - ref_loss) / abs(ref_loss)
        tol, ltol = max(2 * t_err, 1e-3), max(2 * t_lerr, 1e-3)
        report(f"{tag} bf16 logits", e <= tol, f"rel err {e:.2e}, torch bf16 {t_err:.2e} (tol {tol:.2e})")
        report(f"{tag} bf16 loss", le <= ltol, f"rel err {le:.2e}, torch bf16 {t_lerr:.2e} (tol {ltol:.2e})")
    except Exception as ex:  # a load refusal is a failure with its message
        report(f"{tag} load", False, str(ex))
    attnlab = os.path.join(build, "attnlab")
    d_ours, d_back = os.path.join(work, tag, "attnlab_ckpt"), os.path.join(work, tag, "hf_back")
    try:
        run([attnlab, "convert", d_hf, d_ours, "--to", "attnlab"])
        run([attnlab, "convert", d_ours, d_back, "--to", "hf"])
        back, info = model_cls.from_pretrained(d_back, output_loading_info=True, attn_implementation="eager")
        bad = [str(k) for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
               for k in info.get(key, [])]
        report(f"{tag} convert -> hf: from_pretrained keys", not bad, f"problems: {bad}" if bad else "none missing or unexpected")
        lg, _ = torch_logits(back.eval().cuda(), x, y)
        e = rel(lg, ref_lg)
        report(f"{tag} convert -> hf: from_pretrained logits", e <= 1e-6, f"rel err {e:.2e} vs the original (tol 1e-6)")
    except Exception as ex:
        report(f"{tag} convert", False, str(ex))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the attnlab build directory")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    a = ap.parse_args()
    for exe in ("attnlab", "model_logits_dump"):
        if not os.path.exists(os.path.join(a.build, exe)):
            sys.exit(f"{os.path.join(a.build, exe)} is missing: build attnlab first")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")
    work = a.work or tempfile.mkdtemp(prefix="hf_llama_")
    os.makedirs(work, exist_ok=True)
    common = dict(vocab_size=1000, hidden_act="silu", attention_dropout=0.0)
    try:
        # GQA, untied, head dim 64 (the wgmma kernels), theta 10000
        check_config(a.build, work, "llama-L3-C256-gqa", "Llama",
                     dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, hidden_size=256,
                          intermediate_size=688, max_position_embeddings=512, rms_norm_eps=1e-5,
                          rope_theta=10000.0, tie_word_embeddings=False, **common), B=2, T=256, seed=1)
        # MHA, tied head, head dim 128, LLaMA 3's base, biases on every linear layer
        check_config(a.build, work, "llama-L2-C256-bias", "Llama",
                     dict(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, hidden_size=256,
                          intermediate_size=512, max_position_embeddings=1024, rms_norm_eps=1e-6,
                          rope_theta=500000.0, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                          **common), B=1, T=1024, seed=2)
        # LLaMA 3.1's rope_scaling (llama3), with a short original context so that most of the
        # frequencies are scaled or interpolated within T; then linear scaling
        check_config(a.build, work, "llama3-scaling-L2-C256", "Llama",
                     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=256,
                          intermediate_size=512, max_position_embeddings=2048, rms_norm_eps=1e-5,
                          rope_theta=500000.0, tie_word_embeddings=True,
                          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                            high_freq_factor=4.0, original_max_position_embeddings=64),
                          **common), B=2, T=300, seed=4)
        check_config(a.build, work, "llama-linear-scaling-L2-C256", "Llama",
                     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, hidden_size=256,
                          intermediate_size=512, max_position_embeddings=2048, rms_norm_eps=1e-5,
                          rope_theta=10000.0, tie_word_embeddings=False,
                          rope_scaling=dict(rope_type="linear", factor=4.0), **common), B=1, T=400, seed=5)
        # Mistral: a sliding window shorter than the sequence
        check_config(a.build, work, "mistral-L2-C256-window", "Mistral",
                     dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=256,
                          intermediate_size=512, max_position_embeddings=1024, rms_norm_eps=1e-5,
                          rope_theta=1e6, sliding_window=96, tie_word_embeddings=False, **common),
                     B=2, T=300, seed=3)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAIL' if FAILURES else 'PASS'}: {len(FAILURES)} check(s) failed" + (f": {', '.join(FAILURES)}" if FAILURES else ""))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
