#!/usr/bin/env python3
"""`attnlab prepare` throughput against tiktoken on the same text (issue 4's target).

  python3 scripts/bench_prepare.py --attnlab BUILD/attnlab [--mb 20] [--threads 1 2] [--repeats 3]
                                  [--copies 1] [--xz-files 16]

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
  N procs .txt     N separate `prepare --threads 1` processes on the plain file at once, MB/s of
                   all together: the machine's own ceiling for N single-threaded encoders (SMT,
                   clock boost and memory bandwidth limit it; threads in one process cannot beat it)
With `--copies C` the prepare inputs hold the text C times over (tiktoken encodes it once: its
rate does not depend on the length), so that runs at many threads last long enough to measure.
Process start-up and vocabulary loading (measured with a one-line input, best of 5 or more) are
subtracted from the prepare times and printed separately. A rate whose time after the subtraction
is under half the start-up is marked `*` (the start-up itself varies between runs by enough to
make such rates unreliable: docs/tokenizer.md, "prepare throughput"); `n/a`: the run was not
longer than the start-up. MB/s are of uncompressed text; ratio = prepare / tiktoken.
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


def run_processes(exe, vocab_dir, path, out_dir, n):
  """Wall time of n concurrent single-threaded prepare runs of the same file."""
  outs = [f"{out_dir}_p{i}" for i in range(n)]
  for o in outs:
    shutil.rmtree(o, ignore_errors=True)
  t0 = time.perf_counter()
  procs = [subprocess.Popen([exe, "prepare", path, "--out", o, "--tokenizer", "gpt2:" + vocab_dir,
                             "--delimiter", "\\n\\n\\n", "--threads", "1", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for o in outs]
  rcs = [q.wait() for q in procs]
  seconds = time.perf_counter() - t0
  if any(rcs):
    raise RuntimeError(f"prepare exited with {rcs}")
  for o in outs:
    shutil.rmtree(o, ignore_errors=True)
  return seconds


def best_prepare(exe, vocab_dir, path, out_dir, threads, repeats):
  return min(run_prepare(exe, vocab_dir, path, out_dir, threads) for _ in range(repeats))


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--attnlab", required=True, help="the attnlab CLI")
  p.add_argument("--mb", type=float, default=20)
  p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--xz-files", type=int, default=16, help="K: the text as K .xz files too")
  p.add_argument("--copies", type=int, default=1, help="C: prepare inputs hold the text C times")
  p.add_argument("--modes", default="tiktoken,xz,parts,txt,procs",
                 help="columns to measure (comma-separated subset of the default); the others "
                 "print n/a")
  args = p.parse_args()
  modes = set(args.modes.split(","))
  unknown = modes - {"tiktoken", "xz", "parts", "txt", "procs"}
  if unknown:
    sys.exit(f"bench_prepare.py: unknown --modes {sorted(unknown)}")
  data_dir = te.shared_data_dir()
  vocab_dir = os.path.join(data_dir, "gpt2-vocab")
  enc = te.reference_encoding(data_dir)
  text = bt.corpus_text(data_dir, int(args.mb * 1e6))
  mb = args.copies * len(text) / 1e6  # what each prepare run reads
  machine = platform.processor() or platform.machine()
  print(f"text: {len(text):,d} bytes (x {args.copies} for prepare) from {data_dir}/corpus; "
        f"machine: {machine}, "
        f"{os.cpu_count()} logical CPUs; {time.strftime('%Y-%m-%d')}")
  with tempfile.TemporaryDirectory(prefix="attnlab_bench_prepare_") as tmp:
    plain = os.path.join(tmp, "text.txt")
    xz = os.path.join(tmp, "text.txt.xz")
    tiny = os.path.join(tmp, "tiny.txt")
    out = os.path.join(tmp, "out")
    with open(plain, "wb") as f:
      for _ in range(args.copies):
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
        for _ in range(args.copies):
          f.write(job[1])

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:  # lzma drops the GIL
      jobs = ([(xz, text)] if "xz" in modes else []) + \
          (list(zip(xz_parts, parts)) if "parts" in modes else [])
      list(pool.map(compress, jobs))
    with open(tiny, "wb") as f:
      f.write(b"hello world\n")
    startup = best_prepare(args.attnlab, vocab_dir, tiny, out, 1, max(5, args.repeats))

    def rate(seconds):  # MB/s after the start-up, marked when the start-up dominates
      if seconds <= 0:
        return "n/a", None
      return f"{mb / seconds:.2f}" + ("*" if seconds < 0.5 * startup else ""), mb / seconds

    def ratio(r, tk):
      return "n/a" if r is None or tk != tk else f"{r / tk:.2f}"

    print(f"prepare start-up + vocabulary load: {startup:.3f} s (subtracted below)")
    k = f"{len(parts)} x .xz"
    print(f"{'threads':>7} {'tiktoken MB/s':>14} {'prepare .xz MB/s':>17} "
          f"{'prepare ' + k + ' MB/s':>20} {'prepare .txt MB/s':>18} {'ratio .xz':>9} "
          f"{'ratio ' + k:>14} {'ratio .txt':>10} {'N procs .txt MB/s':>18}")
    for n in args.threads:
      nan = float("nan")
      tk = bt.bench_tiktoken(enc, text, n, args.repeats) if "tiktoken" in modes else nan

      def timed(mode, inputs):
        if mode not in modes:
          return 0.0
        return best_prepare(args.attnlab, vocab_dir, inputs, out, n, args.repeats) - startup

      t_xz, t_parts, t_txt = timed("xz", xz), timed("parts", xz_parts), timed("txt", plain)
      t_procs = (min(run_processes(args.attnlab, vocab_dir, plain, out, n)
                     for _ in range(args.repeats)) - startup) if "procs" in modes else 0.0
      (s_xz, r_xz), (s_parts, r_parts), (s_txt, r_txt) = rate(t_xz), rate(t_parts), rate(t_txt)
      s_procs = "n/a" if t_procs <= 0 else f"{n * mb / t_procs:.2f}"
      print(f"{n:>7} {tk:>14.2f} {s_xz:>17} {s_parts:>20} {s_txt:>18} {ratio(r_xz, tk):>9} "
            f"{ratio(r_parts, tk):>14} {ratio(r_txt, tk):>10} {s_procs:>18}", flush=True)


if __name__ == "__main__":
  main()
