#!/usr/bin/env python3
"""`attnlab prepare` throughput against tiktoken on the same text (issue 4's target).

  python3 scripts/bench_prepare.py --attnlab BUILD/attnlab [--mb 20] [--threads 1 2] [--repeats 3]

Builds ~`--mb` MB of text from the shared corpus (an equal share of every corpus/*/*.txt.xz, cut
at newlines; scripts/bench_tokenizer.py), writes it once as .txt.xz, once as `--xz-files` .txt.xz
files (cut at document breaks, so the documents are the same) and once as plain .txt, then for
each thread count N measures, best of `--repeats`:
  tiktoken         encode_ordinary (N = 1) / encode_ordinary_batch(num_threads=N) on N parts of
                   the text already in memory (tiktoken's best case: no I/O, no decompression)
  prepare .xz      `attnlab prepare text.txt.xz --threads N`: the whole command, wall clock,
                   including xz decoding, document splitting, train/val split and shard writing
  prepare K x .xz  the same on the K files (decoded up to N at a time)
  prepare .txt     the same on the plain file
Process start-up and vocabulary loading (measured with a one-line input) are subtracted from the
prepare times and printed separately. MB/s are of uncompressed text; ratio = prepare / tiktoken.
The tiktoken Encoding is built offline from gpt2-vocab/ (scripts/tokenizer_exactness.py).
"""
import argparse
import concurrent.futures
import lzma
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tokenizer as bt  # noqa: E402
import tokenizer_exactness as te  # noqa: E402


def run_prepare(exe, vocab_dir, path, out_dir, threads):
  shutil.rmtree(out_dir, ignore_errors=True)
  paths = path if isinstance(path, list) else [path]
  t0 = time.perf_counter()
  subprocess.run([exe, "prepare", *paths, "--out", out_dir, "--tokenizer", "gpt2:" + vocab_dir,
                  "--delimiter", "\\n\\n\\n", "--threads", str(threads), "--no-progress"],
                 check=True, capture_output=True, text=True)
  return time.perf_counter() - t0


def best_prepare(exe, vocab_dir, path, out_dir, threads, repeats):
  return min(run_prepare(exe, vocab_dir, path, out_dir, threads) for _ in range(repeats))


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--attnlab", required=True, help="the attnlab CLI")
  p.add_argument("--mb", type=float, default=20)
  p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--xz-files", type=int, default=16, help="K: the text as K .xz files too")
  args = p.parse_args()
  data_dir = te.shared_data_dir()
  vocab_dir = os.path.join(data_dir, "gpt2-vocab")
  enc = te.reference_encoding(data_dir)
  text = bt.corpus_text(data_dir, int(args.mb * 1e6))
  mb = len(text) / 1e6
  machine = platform.processor() or platform.machine()
  print(f"text: {len(text):,d} bytes from {data_dir}/corpus; machine: {machine}, "
        f"{os.cpu_count()} logical CPUs; {time.strftime('%Y-%m-%d')}")
  with tempfile.TemporaryDirectory(prefix="attnlab_bench_prepare_") as tmp:
    plain = os.path.join(tmp, "text.txt")
    xz = os.path.join(tmp, "text.txt.xz")
    tiny = os.path.join(tmp, "tiny.txt")
    out = os.path.join(tmp, "out")
    with open(plain, "wb") as f:
      f.write(text)
    parts, begin = [], 0
    for i in range(1, args.xz_files + 1):
      at = text.find(b"\n\n\n", len(text) * i // args.xz_files) if i < args.xz_files else -1
      end = len(text) if at < 0 else at + 3
      parts.append(text[begin:max(begin, end)])
      begin = max(begin, end)
    xz_parts = [os.path.join(tmp, f"part{i:03d}.txt.xz") for i in range(len(parts))]

    def compress(job):
      with lzma.open(job[0], "wb", preset=6) as f:
        f.write(job[1])

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:  # lzma drops the GIL
      list(pool.map(compress, [(xz, text)] + list(zip(xz_parts, parts))))
    with open(tiny, "wb") as f:
      f.write(b"hello world\n")
    startup = best_prepare(args.attnlab, vocab_dir, tiny, out, 1, args.repeats)
    print(f"prepare start-up + vocabulary load: {startup:.3f} s (subtracted below)")
    k = f"{len(parts)} x .xz"
    print(f"{'threads':>7} {'tiktoken MB/s':>14} {'prepare .xz MB/s':>17} "
          f"{'prepare ' + k + ' MB/s':>20} {'prepare .txt MB/s':>18} {'ratio .xz':>9} "
          f"{'ratio ' + k:>14} {'ratio .txt':>10}")
    for n in args.threads:
      tk = bt.bench_tiktoken(enc, text, n, args.repeats)
      t_xz = best_prepare(args.attnlab, vocab_dir, xz, out, n, args.repeats) - startup
      t_parts = best_prepare(args.attnlab, vocab_dir, xz_parts, out, n, args.repeats) - startup
      t_txt = best_prepare(args.attnlab, vocab_dir, plain, out, n, args.repeats) - startup
      r_xz, r_parts, r_txt = mb / t_xz, mb / t_parts, mb / t_txt
      print(f"{n:>7} {tk:>14.2f} {r_xz:>17.2f} {r_parts:>20.2f} {r_txt:>18.2f} {r_xz / tk:>9.2f} "
            f"{r_parts / tk:>14.2f} {r_txt / tk:>10.2f}", flush=True)


if __name__ == "__main__":
  main()
