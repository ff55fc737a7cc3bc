#!/usr/bin/env python3
"""Hugging Face GPT-2 interop check against transformers (run on the GPU host; nothing is downloaded).

For each config (random weights, every tensor perturbed so that a swapped, untransposed or
mis-tied tensor shows; the second config has n_positions 1024):
  1. GPT2LMHeadModel(GPT2Config(...)).save_pretrained(DIR/prefixed)  (model.safetensors,
     `transformer.` names) and the hub layout DIR/hub (names without the prefix, plus the
     h.N.attn.bias / attn.masked_bias buffers older hub files carry);
  2. attnlab loads both through load_model_source (build/model_logits_dump) and its logits and
     loss are compared with transformers' on the same tokens:
       fp32 (CUDA, TF32 off on both sides): max|ours - torch| / max|torch| <= 1e-4 (observed ~1e-6)
       bf16: attnlab's bf16 error vs the fp32 reference <= 2x the error of transformers run in
             bf16 (model.to(torch.bfloat16)) vs the same reference (STYLE.md: the bound is taken
             from a same-precision reference run), with a floor of 1e-3;
  3. `attnlab convert` hf -> attnlab -> hf and -> llmc: GPT2LMHeadModel.from_pretrained(converted)
     loads with no missing or unexpected keys and gives the same logits as the original
     (exact: the weights are the same fp32 values); the attnlab and llm.c copies give attnlab's
     logits again (exact).
Prints one PASS/FAIL line per check, the errors, and exits 1 if any failed.

  python3 scripts/hf_interop_check.py --build build      # needs build/attnlab, build/model_logits_dump
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

FAILURES = []


def report(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILURES.append(name)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"]).copy())
    return out


def rel(a, b):
    """max |a - b| / max |b| (b the reference)."""
    a, b = a.double().cpu(), b.double().cpu()
    s = b.abs().max().item()
    return (a - b).abs().max().item() / (s if s > 0 else 1.0)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p


def perturb(model, seed):
    """Random values in every tensor (LayerNorm weights around 1, biases around 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.02 * noise)
            else:
                p.copy_(0.02 * noise)


def save_hub_layout(model, cfg, dst):
    """The hub's older layout: no `transformer.` prefix, no lm_head, the attention mask buffers."""
    from safetensors.torch import save_file
    os.makedirs(dst, exist_ok=True)
    sd = {}
    for k, v in model.state_dict().items():
        if k.startswith("lm_head."):
            continue
        k = k[len("transformer."):] if k.startswith("transformer.") else k
        if k.endswith(".attn.bias") and v.dim() == 4 or k.endswith(".attn.masked_bias"):
            continue  # added below in the hub's form (newer transformers do not keep them)
        sd[k] = v.detach().contiguous().clone()
    P = cfg.n_positions
    mask = torch.tril(torch.ones(P, P, dtype=torch.uint8)).view(1, 1, P, P).float()
    for l in range(cfg.n_layer):
        sd[f"h.{l}.attn.bias"] = mask.clone()
        sd[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg.to_json_file(os.path.join(dst, "config.json"))


def torch_logits(model, x, y):
    with torch.no_grad():
        out = model(x.cuda())
        lg = out.logits.float()
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.cuda().reshape(-1))
    return lg.cpu(), loss.item()


def ours(build, model_dir, tokens, B, T, precision, out):
    run([os.path.join(build, "model_logits_dump"), "--model", model_dir, "--tokens", tokens,
         "--batch", str(B), "--seq", str(T), "--device", "cuda", "--precision", precision, "--out", out])
    d = read_safetensors(out)
    return d["logits"], d["loss"].item()


def check_config(build, work, tag, cfg_kwargs, B, T, seed):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(**cfg_kwargs)
    model = GPT2LMHeadModel(cfg)
    perturb(model, seed)
    model = model.eval()
    d_pre = os.path.join(work, tag, "prefixed")
    d_hub = os.path.join(work, tag, "hub")
    model.save_pretrained(d_pre, safe_serialization=True)
    save_hub_layout(model, cfg, d_hub)
    model = model.cuda()

    g = torch.Generator().manual_seed(seed + 1)
    toks = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=g, dtype=torch.int32)
    tok_path = os.path.join(work, tag, "tokens.i32")
    toks.numpy().tofile(tok_path)
    x, y = toks[:, :-1].long(), toks[:, 1:].long()
    ref_lg, ref_loss = torch_logits(model, x, y)
    bf_model = GPT2LMHeadModel(cfg).eval()
    bf_model.load_state_dict(model.state_dict())
    bf_model = bf_model.to(torch.bfloat16).cuda()
    bf_lg, bf_loss = torch_logits(bf_model, x, y)
    del bf_model
    torch_bf16_err = rel(bf_lg, ref_lg)
    torch_bf16_loss_err = abs(bf_loss - ref_loss) / abs(ref_loss)

    for layout, d in (("prefixed", d_pre), ("hub", d_hub)):
        try:
            lg, loss = ours(build, d, tok_path, B, T, "fp32", os.path.join(work, tag, f"{layout}_f32.st"))
            e, le = rel(lg, ref_lg), abs(loss - ref_loss) / abs(ref_loss)
            report(f"{tag} {layout} fp32 logits", e <= 1e-4, f"rel err {e:.2e} (tol 1e-4)")
            report(f"{tag} {layout} fp32 loss", le <= 1e-5,
                   f"ours {loss:.6f} torch {ref_loss:.6f} rel err {le:.2e} (tol 1e-5)")
            lg, loss = ours(build, d, tok_path, B, T, "bf16", os.path.join(work, tag, f"{layout}_bf16.st"))
            e, le = rel(lg, ref_lg), abs(loss - ref_loss) / abs(ref_loss)
            tol, ltol = max(2 * torch_bf16_err, 1e-3), max(2 * torch_bf16_loss_err, 1e-3)
            report(f"{tag} {layout} bf16 logits", e <= tol,
                   f"rel err {e:.2e}, torch bf16 {torch_bf16_err:.2e} (tol {tol:.2e})")
            report(f"{tag} {layout} bf16 loss", le <= ltol,
                   f"rel err {le:.2e}, torch bf16 {torch_bf16_loss_err:.2e} (tol {ltol:.2e})")
        except Exception as ex:  # a load refusal is a failure with its message
            report(f"{tag} {layout} load", False, str(ex))

    # convert: hf -> attnlab -> hf (from_pretrained) and -> llmc
    attnlab = os.path.join(build, "attnlab")
    d_ours = os.path.join(work, tag, "attnlab_ckpt")
    d_back = os.path.join(work, tag, "hf_back")
    f_llmc = os.path.join(work, tag, "model.bin")
    try:
        run([attnlab, "convert", d_hub, d_ours, "--to", "attnlab"])
        run([attnlab, "convert", d_ours, d_back, "--to", "hf"])
        run([attnlab, "convert", d_ours, f_llmc, "--to", "llmc"])
        back, info = GPT2LMHeadModel.from_pretrained(d_back, output_loading_info=True)
        # transformers 5 reports sets, 4.x lists
        missing = [k for k in info["missing_keys"] if not k.endswith(".attn.bias") and not k.endswith("masked_bias")]
        bad = missing + [str(k) for key in ("unexpected_keys", "mismatched_keys", "error_msgs")
                         for k in info.get(key, [])]
        report(f"{tag} convert -> hf: from_pretrained keys", not bad, f"problems: {bad}" if bad else "none missing or unexpected")
        tied = back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr()
        report(f"{tag} convert -> hf: head tied", tied, "lm_head is wte" if tied else "lm_head is a separate tensor")
        back = back.eval().cuda()
        lg, loss = torch_logits(back, x, y)
        e = rel(lg, ref_lg)
        report(f"{tag} convert -> hf: from_pretrained logits", e <= 1e-6, f"rel err {e:.2e} vs the original (tol 1e-6)")
        lg_hub, _ = ours(build, d_hub, tok_path, B, T, "fp32", os.path.join(work, tag, "a.st"))
        for what, d in (("attnlab", d_ours), ("llmc", f_llmc)):
            lg, _ = ours(build, d, tok_path, B, T, "fp32", os.path.join(work, tag, f"{what}.st"))
            e = rel(lg, lg_hub)
            report(f"{tag} convert -> {what}: attnlab logits", e == 0.0, f"rel err {e:.2e} vs the hf source (exact expected)")
    except Exception as ex:
        report(f"{tag} convert", False, str(ex))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the attnlab build directory")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args()
    for exe in ("attnlab", "model_logits_dump"):
        if not os.path.exists(os.path.join(a.build, exe)):
            sys.exit(f"{os.path.join(a.build, exe)} is missing: build attnlab first (cmake --build {a.build})")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")
    work = a.work or tempfile.mkdtemp(prefix="hf_interop_")
    os.makedirs(work, exist_ok=True)
    try:
        check_config(a.build, work, "L4-C256-P256",
                     dict(n_layer=4, n_head=4, n_embd=256, vocab_size=50257, n_positions=256), B=2, T=128, seed=1)
        check_config(a.build, work, "L2-C128-P1024",
                     dict(n_layer=2, n_head=2, n_embd=128, vocab_size=50257, n_positions=1024), B=1, T=1024, seed=2)
    finally:
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAIL' if FAILURES else 'PASS'}: {len(FAILURES)} check(s) failed" + (f": {', '.join(FAILURES)}" if FAILURES else ""))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
