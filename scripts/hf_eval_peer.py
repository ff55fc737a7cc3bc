#!/usr/bin/env python3
"""Zero-shot task scoring with plain Hugging Face transformers, for comparison with `attnlab eval`.

Same conventions as attnlab (docs/eval.md): the continuation is " " + text unless the context ends
with whitespace (also where the text starts with it, as lm-eval's target delimiter); the context's
trailing whitespace moves to the front of
the continuation; continuation tokens = encode(context + continuation)[len(encode(context)):]; an
empty context is <|endoftext|>; inputs are left-truncated to the model's context; acc = argmax of
the summed log-likelihood, acc_norm = argmax of it divided by the option text's characters
(lm-eval's len(choice)); LAMBADA-style files: acc = every continuation token greedy,
perplexity = exp(-mean ll). Prompts: --prompt lm-eval (default) gives multiple-choice queries that
start with "Question:" lm-eval's "\nAnswer:" cue, as `attnlab eval --prompt lm-eval` does.

  python3 scripts/hf_eval_peer.py HF_DIR --vocab /work/shared/data/gpt2-vocab \
      --task-dir /work/shared/data/eval [--limit N] [--batch 16] [--dtype bf16|fp32] \
      [--prompt lm-eval|file] [--out hf.json]
"""
import argparse
import glob
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel, GPT2TokenizerFast


def lm_eval_query(query):
    if not query.startswith("Question:") or "\nAnswer:" in query:
        return query
    return query.rstrip(" \t\n\r\v\f") + "\nAnswer:"


def load_task(path, limit, prompt="lm-eval"):
    examples = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if limit and len(examples) >= limit:
                break
            if not line.strip():
                continue
            r = json.loads(line)
            if "choices" in r:
                q = lm_eval_query(r["query"]) if prompt == "lm-eval" else r["query"]
                kind, opts, gold = "multiple_choice", [(q, c) for c in r["choices"]], r["gold"]
            elif "context_options" in r:
                kind, opts, gold = "schema", [(c, r["continuation"]) for c in r["context_options"]], r["gold"]
            else:
                kind, opts, gold = "language_modeling", [(r["context"], r["continuation"])], 0
            examples.append((kind, opts, gold))
    return examples


def scored_pair(context, text):
    cont = text if context[-1:].isspace() else " " + text
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + cont


def request(tok, context, text, max_len):
    ctx, cont = scored_pair(context, text)
    if ctx == "":
        ctx_ids = [tok.eos_token_id]
        whole = ctx_ids + tok.encode(cont)
    else:
        ctx_ids = tok.encode(ctx)
        whole = tok.encode(ctx + cont)
    n_cont = len(whole) - len(ctx_ids)
    assert 0 < n_cont <= max_len, f"continuation of {n_cont} tokens"
    window = whole[-(max_len + 1):]
    return window[:-1], window[1:], n_cont  # inputs, targets, scored = the last n_cont targets


@torch.no_grad()
def score(model, reqs, batch, device):
    """(summed log-likelihood, all greedy) per request, batched by length like attnlab."""
    out = [None] * len(reqs)
    order = sorted(range(len(reqs)), key=lambda i: -len(reqs[i][0]))
    for at in range(0, len(order), batch):
        idx = order[at:at + batch]
        T = max(len(reqs[i][0]) for i in idx)
        inp = torch.zeros((len(idx), T), dtype=torch.long)
        for b, i in enumerate(idx):
            inp[b, :len(reqs[i][0])] = torch.tensor(reqs[i][0])
        logits = model(inp.to(device)).logits.float()
        logp = F.log_softmax(logits, dim=-1)
        for b, i in enumerate(idx):
            x, y, n = reqs[i]
            L = len(x)
            tgt = torch.tensor(y[L - n:], device=device)
            rows = logp[b, L - n:L]
            ll = rows.gather(1, tgt[:, None]).sum().item()
            greedy = bool((rows.argmax(-1) == tgt).all().item())
            out[i] = (ll, greedy)
    return out


def run_task(model, tok, path, limit, batch, device, max_len, prompt):
    t0 = time.time()
    examples = load_task(path, limit, prompt)
    reqs, owner = [], []
    for e, (_, opts, _) in enumerate(examples):
        for c, t in opts:
            reqs.append(request(tok, c, t, max_len))
            owner.append(e)
    scores = score(model, reqs, batch, device)
    acc, acc_norm, lls = [], [], []
    at = 0
    for kind, opts, gold in examples:
        s = scores[at:at + len(opts)]
        at += len(opts)
        ll = [v for v, _ in s]
        if kind == "language_modeling":
            acc.append(float(s[0][1]))
            lls.append(ll[0])
            continue
        acc.append(float(max(range(len(ll)), key=lambda k: (ll[k], -k)) == gold))
        if kind == "multiple_choice":
            norm = [ll[k] / max(1, len(opts[k][1])) for k in range(len(ll))]
            acc_norm.append(float(max(range(len(norm)), key=lambda k: (norm[k], -k)) == gold))
    res = {"kind": examples[0][0], "examples": len(examples), "acc": sum(acc) / len(acc)}
    if acc_norm:
        res["acc_norm"] = sum(acc_norm) / len(acc_norm)
    if lls:
        res["perplexity"] = math.exp(-sum(lls) / len(lls))
    res["seconds"] = time.time() - t0
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("--vocab", help="dir with encoder.json + vocab.bpe (default: tokenizer files in model_dir)")
    p.add_argument("--task-dir")
    p.add_argument("--tasks", nargs="*", default=[], help="name=FILE ...")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--prompt", choices=["lm-eval", "file"], default="lm-eval")
    p.add_argument("--out")
    a = p.parse_args()

    if a.vocab:
        vocab, merges = os.path.join(a.vocab, "encoder.json"), os.path.join(a.vocab, "vocab.bpe")
        # transformers 5 takes vocab= / merges= (vocab_file= is silently ignored there and gives
        # an empty tokenizer); 4.x takes vocab_file= / merges_file=.
        tok = GPT2TokenizerFast(vocab=vocab, merges=merges)
        if len(tok) < 50257:
            tok = GPT2TokenizerFast(vocab_file=vocab, merges_file=merges)
        assert len(tok) >= 50257 and tok.encode("Hello world") == [15496, 995], "GPT-2 tokenizer not loaded"
    else:
        tok = GPT2TokenizerFast.from_pretrained(a.model_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if a.dtype == "bf16" and device == "cuda" else torch.float32
    model = GPT2LMHeadModel.from_pretrained(a.model_dir, torch_dtype=dtype).to(device).eval()
    max_len = model.config.n_positions

    tasks = [t.split("=", 1) for t in a.tasks]
    if a.task_dir:
        tasks += [(os.path.splitext(os.path.basename(f))[0], f)
                  for f in sorted(glob.glob(os.path.join(a.task_dir, "*.jsonl")))]
    results = {}
    print(f"{'task':22} {'acc':>8} {'acc_norm':>9} {'ppl':>9} {'seconds':>8}  ({device}, {a.dtype})")
    for name, path in tasks:
        r = run_task(model, tok, path, a.limit, a.batch, device, max_len, a.prompt)
        results[name] = r
        print(f"{name:22} {r['acc']:8.4f} {r.get('acc_norm', float('nan')):9.4f} "
              f"{r.get('perplexity', float('nan')):9.3f} {r['seconds']:8.1f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model_dir, "device": device, "dtype": a.dtype, "tasks": results}, f, indent=2)


if __name__ == "__main__":
    main()
