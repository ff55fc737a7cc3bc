#!/usr/bin/env python3
"""Encoding throughput: attnlab's GPT-2 tokenizer against tiktoken on the same text.

  python3 scripts/bench_tokenizer.py --bench-exe BUILD/bench_tokenizer [--mb 20] [--threads 1 2]

Builds ~`--mb` MB of text from the corpus (an equal share from the start of every
corpus/*/*.txt.xz, cut at newlines), then for each thread count measures
  tiktoken:  encode_ordinary (1 thread) / encode_ordinary_batch(num_threads=N) over N parts
  attnlab:   bench_tokenizer bench (cold and warm per-thread caches), the same N parts
and prints MB/s and the ratio attnlab / tiktoken. The tiktoken Encoding is built offline from
gpt2-vocab/ (scripts/tokenizer_exactness.py), never downloaded. Best of `--repeats` runs.
"""
import argparse
import glob
import lzma
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_exactness as te  # noqa: E402


def corpus_text(data_dir, total_bytes):
  files = sorted(glob.glob(os.path.join(data_dir, "corpus", "*", "*.txt.xz")))
  share = total_bytes // len(files)
  parts = []
  for path in files:
    with lzma.open(path, "rb") as f:
      data = f.read(share)
    parts.append(data[:data.rindex(b"\n") + 1])
  return b"".join(parts)


def split_parts(text, n):
  """Same cut as bench_tokenizer.cpp: at the first newline at or after len*i/n."""
  parts, begin = [], 0
  for i in range(1, n + 1):
    if i < n:
      nl = text.find(b"\n", len(text) * i // n)
      end = len(text) if nl < 0 else nl + 1
    else:
      end = len(text)
    end = max(end, begin)
    parts.append(text[begin:end])
    begin = end
  return parts


def bench_tiktoken(enc, text, threads, repeats):
  parts = [p.decode("utf-8") for p in split_parts(text, threads)]
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    if threads == 1:
      enc.encode_ordinary(parts[0])
    else:
      enc.encode_ordinary_batch(parts, num_threads=threads)
    best = min(best, time.perf_counter() - t0)
  return len(text) / 1e6 / best


def bench_ours(exe, vocab_dir, path, threads, repeats):
  out = subprocess.run([exe, "bench", "gpt2:" + vocab_dir, path, str(threads), str(repeats)],
                       check=True, capture_output=True, text=True).stdout
  cold = float(re.search(r"cold_MB/s=([\d.]+)", out).group(1))
  warm = float(re.search(r"warm_MB/s=([\d.]+)", out).group(1))
  return cold, warm


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--bench-exe", required=True)
  p.add_argument("--mb", type=float, default=20)
  p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  data_dir = te.shared_data_dir()
  enc = te.reference_encoding(data_dir)
  text = corpus_text(data_dir, int(args.mb * 1e6))
  machine = platform.processor() or platform.machine()
  print(f"text: {len(text):,d} bytes from {data_dir}/corpus; machine: {machine}, "
        f"{os.cpu_count()} logical CPUs; {time.strftime('%Y-%m-%d')}")
  with tempfile.NamedTemporaryFile(suffix=".txt") as f:
    f.write(text)
    f.flush()
    print(f"{'threads':>7} {'tiktoken MB/s':>14} {'attnlab cold MB/s':>18} "
          f"{'attnlab warm MB/s':>18} {'ratio cold':>10} {'ratio warm':>10}")
    for n in args.threads:
      tk = bench_tiktoken(enc, text, n, args.repeats)
      cold, warm = bench_ours(args.bench_exe, os.path.join(data_dir, "gpt2-vocab"), f.name, n,
                              args.repeats)
      print(f"{n:>7} {tk:>14.2f} {cold:>18.2f} {warm:>18.2f} {cold / tk:>10.2f} {warm / tk:>10.2f}")


if __name__ == "__main__":
  main()
