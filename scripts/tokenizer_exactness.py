#!/usr/bin/env python3
"""Checks that attnlab's GPT-2 tokenizer gives the same ids as the reference (tiktoken).

The reference is a tiktoken Encoding built offline from the GPT-2 files (no download):
mergeable ranks from encoder.json, the GPT-2 pattern, <|endoftext|> = 50256. For text with
invalid UTF-8 (which tiktoken cannot take), the reference is the GPT-2 pattern in the `regex`
module over the text decoded with surrogateescape (each invalid byte becomes one lone surrogate,
category Cs = "other"), each piece then encoded with tiktoken's own BPE of one piece.

  python3 scripts/tokenizer_exactness.py compare --bench-exe BUILD/bench_tokenizer \
      [--mb-per-file 0.5] [--synthetic-mb 0.5] [--skip-all-code-points]
      Samples text from every corpus file (start and middle), plus synthetic stress text (many
      scripts, emoji, combining marks, long whitespace/digit runs, control characters; a part
      with invalid UTF-8; every code point in context), encodes it with both, and reports bytes
      compared and mismatches.
  python3 scripts/tokenizer_exactness.py golden OUT.jsonl
      Writes the golden cases used by tests/tokenizer/test_gpt2_golden.cpp.

Data: $ATTNLAB_SHARED_DATA (default: ../shared/data next to the repository) with
gpt2-vocab/{encoder.json,vocab.bpe} and corpus/*/*.txt.xz.
Needs: pip install tiktoken regex.
"""
import argparse
import glob
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

import regex
import tiktoken

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def shared_data_dir():
  env = os.environ.get("ATTNLAB_SHARED_DATA")
  if env:
    return env
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
  if not os.path.isdir(path):
    sys.exit(f"no shared data at {path}: set ATTNLAB_SHARED_DATA")
  return path


def gpt2_byte_decoder():
  printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
  cps = {b: b for b in printable}
  extra = 256
  for b in range(256):
    if b not in cps:
      cps[b] = extra
      extra += 1
  return {chr(cp): b for b, cp in cps.items()}


def reference_encoding(data_dir):
  with open(os.path.join(data_dir, "gpt2-vocab", "encoder.json"), encoding="utf-8") as f:
    encoder = json.load(f)
  dec = gpt2_byte_decoder()
  ranks = {}
  special = {}
  for token, idx in encoder.items():
    if token == "<|endoftext|>":
      special[token] = idx
    else:
      ranks[bytes(dec[c] for c in token)] = idx
  # tiktoken ranks pairs by the rank of the merged token; GPT-2's ids are 256 + merge index, so
  # this agrees with vocab.bpe's merge order (checked here, not assumed).
  with open(os.path.join(data_dir, "gpt2-vocab", "vocab.bpe"), encoding="utf-8") as f:
    merges = [line.split(" ") for line in f.read().split("\n")[1:] if line]
  for i, (a, b) in enumerate(merges):
    assert encoder[a + b] == 256 + i, (a, b)
  return tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                           special_tokens=special)


def reference_ids(enc, data):
  """Reference ids of arbitrary bytes."""
  try:
    return enc.encode_ordinary(data.decode("utf-8"))
  except UnicodeDecodeError:
    pass
  text = data.decode("utf-8", errors="surrogateescape")
  ids = []
  for piece in regex.findall(GPT2_PATTERN, text):
    ids.extend(enc._encode_single_piece(piece.encode("utf-8", errors="surrogateescape")))
  return ids


# ---- samples ---------------------------------------------------------------------------------

def corpus_samples(data_dir, bytes_per_file):
  """(name, bytes): the start and the middle of every corpus file, cut at newlines."""
  samples = []
  for path in sorted(glob.glob(os.path.join(data_dir, "corpus", "*", "*.txt.xz"))):
    with lzma.open(path, "rb") as f:
      data = f.read()
    name = os.path.basename(path)
    half = bytes_per_file // 2
    mid = len(data) // 2
    mid = data.index(b"\n", mid) + 1 if b"\n" in data[mid:] else mid
    for tag, start in (("start", 0), ("middle", mid)):
      end = data.find(b"\n", start + half)
      end = len(data) if end < 0 else end + 1
      samples.append((f"{name}:{tag}", data[start:end]))
  return samples


def stress_text(rng, n_chars, allow_invalid):
  """Random mix of everything the pre-tokenizer distinguishes."""
  assigned = []
  for lo, hi in [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF),
                 (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F),
                 (0x2150, 0x218F), (0x2460, 0x24FF), (0x3000, 0x30FF), (0x4E00, 0x4E80),
                 (0xAC00, 0xAC80), (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x1F300, 0x1F6FF),
                 (0x20000, 0x20080)]:
    for cp in range(lo, hi + 1):
      if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
        assigned.append(chr(cp))
  words = ["the", " the", "The", "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "'LL", "don't",
           "I'm", "12345", " 2024", "3.14159", "\u00e9t\u00e9", "e\u0301", "na\u00efve",
           "\U0001F44B\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\u4F60\u597D",
           "\u3053\u3093\u306B\u3061\u306F", "\uC548\uB155", "\u0645\u0631\u062D\u0628\u0627",
           "\u041F\u0440\u0438\u0432\u0435\u0442", "<|endoftext|>", "http://x.org/a?b=c",
           "\r\n", "\n\n", "\t", "\u00A0", "\u3000", "\u2028", "\x0b", "\x0c", "\x1c", "\x85",
           "\x00", "\x7f"]
  spaces = [" ", "  ", "   ", "\n", "\t", " \n", "\n ", "        ", " " * 40, "\n" * 5]
  out = []
  for _ in range(n_chars // 4):
    r = rng.random()
    if r < 0.35:
      out.append(rng.choice(words))
    elif r < 0.6:
      out.append(rng.choice(spaces))
    elif r < 0.95:
      out.append("".join(rng.choice(assigned) for _ in range(rng.randint(1, 6))))
    else:
      out.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 80))))
  data = "".join(out).encode("utf-8")
  if allow_invalid:
    b = bytearray(data)
    for _ in range(len(b) // 200):
      i = rng.randrange(len(b))
      b[i:i] = bytes([rng.choice([0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xF8, 0xFF])])
    data = bytes(b)
  return data


def all_code_points_text():
  """Every code point (no surrogates) between a letter, a digit and punctuation: exercises the
  class of each one in context (about 16 MB)."""
  return "".join(chr(cp) + "a" + chr(cp) + "1" + chr(cp) + "."
                 for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF).encode("utf-8")


# ---- modes -----------------------------------------------------------------------------------

def run_ours(bench_exe, data_dir, data):
  with tempfile.TemporaryDirectory() as tmp:
    src, dst = os.path.join(tmp, "in.txt"), os.path.join(tmp, "ids.bin")
    with open(src, "wb") as f:
      f.write(data)
    subprocess.run([bench_exe, "encode", "gpt2:" + os.path.join(data_dir, "gpt2-vocab"), src, dst],
                   check=True)
    with open(dst, "rb") as f:
      raw = f.read()
  return [int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, len(raw), 4)]


def compare(args):
  data_dir = shared_data_dir()
  enc = reference_encoding(data_dir)
  rng = random.Random(20240501)
  samples = corpus_samples(data_dir, int(args.mb_per_file * 1e6))
  samples.append(("synthetic:valid", stress_text(rng, int(args.synthetic_mb * 1e6), False)))
  samples.append(("synthetic:invalid-utf8", stress_text(rng, int(args.synthetic_mb * 1e6), True)))
  if not args.skip_all_code_points:
    samples.append(("synthetic:all-code-points", all_code_points_text()))
  total_bytes = total_tokens = mismatched = 0
  for name, data in samples:
    want = reference_ids(enc, data)
    got = run_ours(args.bench_exe, data_dir, data)
    ok = want == got
    total_bytes += len(data)
    total_tokens += len(want)
    if not ok:
      mismatched += 1
      i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]),
               min(len(want), len(got)))
      ctx = enc.decode_bytes(want[max(0, i - 5):i + 5])
      print(f"MISMATCH {name}: first differing token {i}: want {want[i:i + 5]} got {got[i:i + 5]}"
            f" near {ctx!r}")
    print(f"{name:45s} {len(data):>10,d} bytes {len(want):>9,d} tokens  {'ok' if ok else 'FAIL'}")
  print(f"total: {len(samples)} samples, {total_bytes:,d} bytes, {total_tokens:,d} tokens, "
        f"{mismatched} mismatching samples")
  return 1 if mismatched else 0


GOLDEN_CASES = [
    ("hello", "Hello world"),
    ("contractions", "I'm sure it's what they'll say: we've, you're, he'd, don't."),
    ("contractions_upper", "IT'S I'M WE'LL THEY'RE 'S 'T 'Re"),
    ("apostrophes", "'' ''s ' 's rock'n'roll o'clock"),
    ("numbers", "1 12 123 1234 12345 3.14159 1,000,000 2024-05-01 0x1F 1e10 "
                "\u0661\u0662\u0663 \u216b\u00b2"),
    ("long_number", "9" * 300),
    ("whitespace_runs", "a  b   c    d\n\ne\n\n\nf \n g\t\th  \t i" + " " * 50 + "j" + " " * 7),
    ("trailing_spaces", "end   "),
    ("crlf_tabs", "line one\r\nline two\r\n\tindented\r\n\r\n"),
    ("long_whitespace", " " * 2000 + "x" + "\n" * 300 + "\t" * 100),
    ("emoji", "I \u2764\ufe0f tokens \U0001F600\U0001F44D\U0001F3FD "
              "\U0001F468\u200D\U0001F469\u200D\U0001F467 !!!"),
    ("cjk", "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002 "
            "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("mixed_scripts", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440, "
                      "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd "
                      "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 "
                      "Gr\u00fc\u00dfe \u03b1\u03b2\u03b3"),
    ("combining", "e\u0301 a\u0308 n\u0303o "
                  "Zalgo: Z\u0351\u036b\u0343a\u0310\u0352l\u0346g\u0344o\u0308"),
    ("precomposed", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m"),
    ("special_text", "text <|endoftext|> more"),
    ("unicode_spaces", "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u200bg\x0bh\x0ci\x1cj"),
    ("controls", "\x00\x01\x07\x1b[0m\x7f end"),
    ("code", "def f(x):\n    return x**2  # square\n\n"
             "if __name__ == '__main__':\n\tprint(f(3))\n"),
    ("math_letters", "\U0001d400\U0001d401 \U0001d7ce\U0001d7cf \u2102\u211d"),
    ("invalid_utf8",
     b"ok \xff\xfe bytes \xc3( \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\x80 end\x80"),
    ("invalid_utf8_mixed",
     b"caf\xc3\xa9 \xe9t\xe9 \xf0\x9f\x98 smile \xf0\x9f\x98\x80 \xbf\xbf\xbf"),
]


def golden(args):
  enc = reference_encoding(shared_data_dir())
  with open(args.out, "w", encoding="utf-8") as f:
    for name, text in GOLDEN_CASES:
      data = text if isinstance(text, bytes) else text.encode("utf-8")
      ids = reference_ids(enc, data)
      assert enc.decode_bytes(ids) == data
      f.write(json.dumps({"name": name, "hex": data.hex(), "ids": ids}) + "\n")
  print(f"wrote {len(GOLDEN_CASES)} cases to {args.out}")


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest="mode", required=True)
  c = sub.add_parser("compare")
  c.add_argument("--bench-exe", required=True, help="path of the built bench_tokenizer")
  c.add_argument("--mb-per-file", type=float, default=0.5, help="MB sampled from each corpus file")
  c.add_argument("--synthetic-mb", type=float, default=0.5, help="MB of each synthetic sample")
  c.add_argument("--skip-all-code-points", action="store_true",
                 help="leave out the 16 MB sample with every code point")
  g = sub.add_parser("golden")
  g.add_argument("out")
  args = p.parse_args()
  sys.exit(compare(args) if args.mode == "compare" else golden(args))


if __name__ == "__main__":
  main()
