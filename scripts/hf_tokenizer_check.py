#!/usr/bin/env python3
"""Checks attnlab's Hugging Face tokenizer.json support against the `tokenizers` library.

Builds tokenizer.json files of both families with `tokenizers` itself (no download):
  byte-level BPE, trained here (BpeTrainer) with LLaMA 3's exact pre_tokenizer
    (Sequence[Split(<LLaMA 3 pattern>, Isolated), ByteLevel(use_regex false)]), then written as
    llama3 (ignore_merges true, plus tokens the merges cannot build, so that the option matters;
    <|begin_of_text|>, <|end_of_text|> and 254 reserved special tokens after the vocabulary;
    TemplateProcessing with <|begin_of_text|>), llama3-merges (ignore_merges false), qwen2 (the
    Qwen2 pattern), gpt2-split (the GPT-2 pattern through Split) and gpt2-bytelevel (the classic
    ByteLevel pre-tokenizer with use_regex true);
  SentencePiece-style BPE, trained with a Metaspace pre-tokenizer, rebuilt as LLaMA 2 lays it out
    (<unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then the trained tokens; byte_fallback,
    fuse_unk) and written as sp-legacy (normalizer Sequence[Prepend, Replace]), sp-metaspace
    (Metaspace prepend_scheme first, split false), sp-metaspace-always-split (the library's
    Metaspace defaults) and sp-legacy-crossing (extra merges across "x▁", which turn off attnlab's
    word-by-word shortcut).
Then encodes texts with attnlab (`attnlab tokenize --tokenizer hf:<file> -- <text>`, one call per
text of at most 100 KB) and with `tokenizers`, and compares the ids. The reference is
Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids with encode_special_tokens
set, so that the text of a special token is encoded as text, as attnlab's encode() does. Texts
with invalid UTF-8, which `tokenizers` cannot take, are compared against a reference built from
the library's own model: for byte-level BPE, the pattern in the `regex` module over the text
decoded with surrogateescape, each piece then given to tokenizer.model.tokenize(); for
SentencePiece-style BPE, each invalid byte replaced by U+0001 (a character outside the vocabulary
whose byte token, like the invalid byte's, takes part in no merge), and that byte token's id
swapped for the invalid byte's.
Decoding: the pieces attnlab prints are joined and compared with the text (for SentencePiece-
style BPE: with the one space the normalizer puts in front; texts that encoding cannot give back,
those with U+2581 or, with Metaspace, a leading space, are counted apart).

  PYTHONPATH=/tmp/site python3 scripts/hf_tokenizer_check.py --attnlab build/attnlab \\
      [--bench-exe build/bench_tokenizer] [--mb-per-file 0.5] [--vocab 4000] [--work DIR]
      [--all-code-points] [--round-trip [--writer EXE]]

--round-trip checks the writer instead (hf_tokenizer_json, src/tokenizer/hf_tokenizer_json.h):
each file goes into a tiny Hugging Face LLaMA directory (zero weights, vocab_size = the
tokenizer's), through `attnlab convert --to attnlab` and back with `--to hf`, and the written
tokenizer.json is loaded with Tokenizer.from_file. Its ids must equal the original file's on every
text the library takes (valid UTF-8), with add_special_tokens true and false and with
encode_special_tokens false and true, and so must its decode of them; tokenizer_config.json must
name PreTrainedTokenizerFast, and `attnlab tokenize` must give the same ids on both files (every
10th adversarial text). GPT-2-form files come back as vocab.json + merges.txt (GPT2Tokenizer),
loaded as GPT2TokenizerFast builds them. --writer EXE replaces the two conversions by
`EXE hf:<original> <written>` (a program that writes hf_tokenizer_json() of the tokenizer it
reads; not part of the build).

--bench-exe adds the encoding speed of each tokenizer (bench_tokenizer bench, 1 thread, best of
3) on the corpus sample, beside the library's encode_batch() of the same text in texts of at most
100 KB, on one thread (RAYON_NUM_THREADS=1; one encode() of the whole sample is slower still).
--all-code-points adds every code point assigned in Unicode 14 (the version of attnlab's tables)
but U+0000, each between a letter, a digit and punctuation, for the byte-level tokenizers (about
4 MB). (No text holds a NUL byte: a command-line argument cannot.)
Data: $ATTNLAB_SHARED_DATA (default ../shared/data next to the repository): corpus/*/*.txt.xz.
Needs: tokenizers (0.23.3 was used), regex. Exit status 1 when anything differs.
"""
import argparse
import glob
import json
import lzma
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the library's encode() on one core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import regex  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
METASPACE = "\u2581"
MAX_TEXT = 100_000  # bytes per `attnlab tokenize` call (Linux takes 128 KiB per argument)


def shared_data_dir():
  env = os.environ.get("ATTNLAB_SHARED_DATA")
  if env:
    return env
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
  if not os.path.isdir(path):
    sys.exit(f"no shared data at {path}: set ATTNLAB_SHARED_DATA")
  return path


def corpus_files(data_dir):
  files = sorted(glob.glob(os.path.join(data_dir, "corpus", "*", "*.txt.xz")))
  if not files:
    sys.exit(f"no corpus/*/*.txt.xz under {data_dir}")
  return files


def cut_at_newline(data, end):
  nl = data.find(b"\n", end)
  return len(data) if nl < 0 else nl + 1


def read_corpus(data_dir, train_bytes, test_bytes):
  """Training text (the start of each file) and test samples (the start and the middle)."""
  train, samples = [], []
  for path in corpus_files(data_dir):
    with lzma.open(path, "rb") as f:
      data = f.read()
    name = os.path.basename(path)
    train.append(data[:cut_at_newline(data, train_bytes)].decode("utf-8", "replace"))
    mid = cut_at_newline(data, len(data) // 2)
    for tag, start in (("start", 0), ("middle", mid)):
      end = cut_at_newline(data, start + test_bytes // 2)
      samples.append((f"{name}:{tag}", data[start:end]))
  return "".join(train), samples


def chunks(data, limit=MAX_TEXT):
  """data cut at newlines (or anywhere in a longer line, at a UTF-8 boundary) into texts."""
  out, start = [], 0
  while start < len(data):
    end = min(len(data), start + limit)
    if end < len(data):
      nl = data.rfind(b"\n", start, end)
      if nl > start:
        end = nl + 1
      else:
        while end > start + 1 and (data[end] & 0xC0) == 0x80:
          end -= 1
    out.append(data[start:end])
    start = end
  return out


# ---- building the tokenizer.json files ---------------------------------------------------------

def template(bos, bos_id):
  return {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": bos, "type_id": 1}},
                   {"Sequence": {"id": "B", "type_id": 1}}],
          "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def added(content, id_):
  return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True}


def byte_level_files(train_text, vocab_size, rng):
  """name -> tokenizer.json (dict) of the byte-level family."""
  tok = Tokenizer(models.BPE(ignore_merges=True))
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator([train_text], trainers.BpeTrainer(
      vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False))
  base = json.loads(tok.to_str())
  vocab = base["model"]["vocab"]
  # Tokens no merge builds: frequent words that did not make it into the vocabulary.
  to_symbols = {b: c for c, b in byte_decoder().items()}
  counts = {}
  for w in regex.findall(r" [a-z]{6,12}", train_text):
    counts[w] = counts.get(w, 0) + 1
  extra = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])
           if "".join(to_symbols[b] for b in w.encode()) not in vocab][:60]
  for w in extra:
    vocab["".join(to_symbols[b] for b in w.encode())] = len(vocab)
  V = len(vocab)
  out = {}

  def variant(pattern, ignore_merges, specials, post, classic=False):
    j = json.loads(json.dumps(base))
    j["model"]["vocab"] = vocab
    j["model"]["ignore_merges"] = ignore_merges
    if classic:
      j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True}
    else:
      j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": pattern}
    j["added_tokens"] = [added(s, V + i) for i, s in enumerate(specials)]
    j["post_processor"] = post
    return j

  llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [
      f"<|reserved_special_token_{i}|>" for i in range(254)]
  bos = template("<|begin_of_text|>", V)
  out["llama3"] = variant(LLAMA3_PATTERN, True, llama3_specials, bos)
  out["llama3-merges"] = variant(LLAMA3_PATTERN, False, llama3_specials, bos)
  out["qwen2"] = variant(QWEN2_PATTERN, True, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": False})
  out["gpt2-split"] = variant(GPT2_PATTERN, False, ["<|endoftext|>"], None)
  out["gpt2-bytelevel"] = variant(None, False, ["<|endoftext|>"], None, classic=True)
  return out, len(extra)


def sentencepiece_files(train_text, vocab_size):
  """name -> tokenizer.json (dict) of the SentencePiece-style family."""
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="first",
                                               split=True)
  tok.train_from_iterator([train_text], trainers.BpeTrainer(
      vocab_size=vocab_size, limit_alphabet=150, show_progress=False))
  trained = json.loads(tok.to_str())
  vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
  for b in range(256):
    vocab[f"<0x{b:02X}>"] = 3 + b
  for t, _ in sorted(trained["model"]["vocab"].items(), key=lambda kv: kv[1]):
    vocab.setdefault(t, len(vocab))
  merges = [list(m) if isinstance(m, list) else m.split(" ") for m in trained["model"]["merges"]]
  assert "\x01" not in vocab, "U+0001 must stay outside the vocabulary (invalid-UTF-8 reference)"
  legacy_decoder = {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": METASPACE}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}

  def variant(normalizer, pre, decoder, extra_merges=()):
    v = dict(vocab)
    m = list(merges)
    for a, b in extra_merges:
      v.setdefault(a + b, len(v))
      m.append([a, b])
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added("<unk>", 0), added("<s>", 1), added("</s>", 2)],
            "normalizer": normalizer, "pre_tokenizer": pre,
            "post_processor": template("<s>", 1), "decoder": decoder,
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": v, "merges": m}}

  legacy_norm = {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": METASPACE},
      {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}]}

  def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": METASPACE, "prepend_scheme": scheme,
            "split": split}

  crossing = [(c, METASPACE) for c in "es.,dt"]
  return {
      "sp-legacy": variant(legacy_norm, None, legacy_decoder),
      "sp-metaspace": variant(None, metaspace("first", False), metaspace("first", False)),
      "sp-metaspace-always-split": variant(None, metaspace("always", True),
                                           metaspace("always", True)),
      "sp-legacy-crossing": variant(legacy_norm, None, legacy_decoder, crossing),
  }


def byte_decoder():
  printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
  cps = {b: b for b in printable}
  extra = 256
  for b in range(256):
    if b not in cps:
      cps[b] = extra
      extra += 1
  return {chr(cp): b for b, cp in cps.items()}


# ---- texts -------------------------------------------------------------------------------------

def adversarial_texts():
  t = [bytes([b]) for b in range(1, 256)]  # NUL cannot go through a command line
  t += [b"a" + bytes([b]) + b"b" for b in range(0x80, 0x100)]
  words = [
      "\u4f60\u597d\u4e16\u754c", "\u3053\u3093\u306b\u3061\u306f", "\uc548\ub155\ud558\uc138\uc694",
      "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
      "\u041f\u0440\u0438\u0432\u0435\u0442", "\u0928\u092e\u0938\u094d\u0924\u0947",
      "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F44B\U0001F3FD!", "e\u0301t\u0301e",
      "n\u0303a\u00efve", "caf\u00e9", "\u00df\u0130\u212a", "\u0661\u0662\u0663\u0664",
      "DON'T", "'LL", "I'M", "WE'RE", "they'VE", "'ſ", "it'ſ", "x'D", "'", "''s",
      "  \n\n  x", "\t\tx", "a\tb", "\r\n", "a\r\n\r\nb", " \r\n ", "x \n y", "a   b", "a   ",
      " hello", "hello ", "  hello  ", " ", "  ", "", "\n", "\n\n\n",
      "<|begin_of_text|>hello", "a<|begin_of_text|> b", "<|end_of_text|>", "<s> hi </s>",
      "<s>hello", "<unk>", "<0x41>", "<|endoftext|>", "<|im_start|>user",
      "\u2581hello", "a\u2581\u2581b", "\u00a0x", "\u3000x", "a\u2028b", "\x85x", "\x0bx",
      "\x0cx", "\x1cx", "\x7f", ".abc", "!!!\n\nx", " ?!\n", "x=1;y=22;", "http://a.b/c?d=e",
      " " * 100, "\n" * 50, "a" * 1000, "9" * 1000, " 9" * 300, "\u00e9" * 500,
  ]
  words += ["1234567890"[:n] for n in range(1, 11)]
  words += [f"x {'7' * n} y" for n in range(1, 11)]
  t += [w.encode("utf-8") for w in words]
  t += [b"\xff", b"a\x80b", b"\xe2\x82", b"x\xc0\x80y", b"\xed\xa0\x80a", b"\xf4\x90\x80\x80",
        b"hello \xff world", b"\xf0\x9f\x98 emoji cut", b" \xc3", b"\xe2\x96\x81\xe2\x96"]
  return [(f"adversarial {i}", x) for i, x in enumerate(t)]


def stress_text(rng, n_bytes):
  words = ["the", " the", "The", "'s", "'S", "'t", "'re", "'ve", "'LL", "don't", "I'm", "12345",
           " 2024", "3.14159", "\u00e9t\u00e9", "e\u0301", "\U0001F44B\U0001F3FD",
           "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\u4F60\u597D", "\uC548\uB155",
           "\u0645\u0631\u062D\u0628\u0627", "\u041F\u0440\u0438\u0432\u0435\u0442", "\r\n",
           "\n\n", "\t", "\u00A0", "\u3000", "\u2028", "\x0b", "\x1c", "\x85", "\x7f", ".", ",",
           "!?", "(", ")", "-", "_", "\"", "$"]
  spaces = [" ", "  ", "   ", "\n", "\t", " \n", "\n ", " " * 9, "\n" * 4]
  out, size = [], 0
  while size < n_bytes:
    r = rng.random()
    if r < 0.45:
      w = rng.choice(words)
    elif r < 0.75:
      w = rng.choice(spaces)
    elif r < 0.9:
      w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
    else:
      w = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))
    out.append(w)
    size += len(w)
  return "".join(out).encode("utf-8")


def all_code_points_text():
  return "".join(chr(cp) + "a" + chr(cp) + "1" + chr(cp) + "."
                 for cp in range(1, 0x110000)  # NUL cannot go through a command line
                 if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"
                 ).encode("utf-8")


# ---- the two encoders --------------------------------------------------------------------------

def unescape_piece(q):
  """The bytes of a piece as `attnlab tokenize` prints it: "..." with C escapes."""
  assert q[:1] == b'"' and q[-1:] == b'"', q
  s, out, i = q[1:-1], bytearray(), 0
  while i < len(s):
    if s[i:i + 1] == b"\\":
      c = s[i + 1:i + 2]
      if c == b"x":
        out.append(int(s[i + 2:i + 4], 16))
        i += 4
        continue
      out += {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"\\": b"\\", b'"': b'"'}[c]
      i += 2
    else:
      out.append(s[i])
      i += 1
  return bytes(out)


def run_attnlab(exe, spec, data):
  r = subprocess.run([exe, "tokenize", "--tokenizer", spec, "--", data], capture_output=True)
  if r.returncode != 0:
    sys.exit(f"attnlab tokenize failed on {spec}: {r.stderr.decode(errors='replace')}")
  lines = r.stdout.split(b"\n")
  ids = [int(x) for x in lines[1].split()]
  pieces = [unescape_piece(line.split(b"\t", 1)[1]) for line in lines[2:2 + len(ids)]]
  return ids, pieces


class Reference:
  def __init__(self, path, family):
    self.tok = Tokenizer.from_file(path)
    self.tok.encode_special_tokens = True
    self.family = family
    self.json = json.load(open(path, encoding="utf-8"))
    pre = self.json["pre_tokenizer"]
    if family == "byte-level":
      pattern = (GPT2_PATTERN if pre["type"] == "ByteLevel"
                 else pre["pretokenizers"][0]["pattern"]["Regex"])
      self.regex = regex.compile(pattern)
      self.to_symbols = {b: c for c, b in byte_decoder().items()}
    else:
      self.byte_ids = {b: self.tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}

  def encode(self, data):
    try:
      return self.tok.encode(data.decode("utf-8"), add_special_tokens=False).ids
    except UnicodeDecodeError:
      pass
    text = data.decode("utf-8", "surrogateescape")
    if self.family == "byte-level":
      ids = []
      for piece in self.regex.findall(text):
        raw = piece.encode("utf-8", "surrogateescape")
        ids += [t.id for t in self.tok.model.tokenize("".join(self.to_symbols[b] for b in raw))]
      return ids
    assert "\x01" not in text
    invalid = [ord(c) - 0xDC00 for c in text if 0xDC80 <= ord(c) <= 0xDCFF]
    stand_in = "".join("\x01" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
    ids = self.tok.encode(stand_in, add_special_tokens=False).ids
    it = iter(invalid)
    return [self.byte_ids[next(it)] if i == self.byte_ids[1] else i for i in ids]


def expected_pieces(family, prefix, data):
  """What attnlab's pieces must join to; None where encoding loses information by design."""
  if family == "byte-level":
    return data
  if "\u2581".encode() in data:
    return None
  starts_with_space = data[:1] == b" "
  if prefix == "metaspace" and starts_with_space:
    return None
  return (b" " if data else b"") + data


# ---- the writer's round trip -------------------------------------------------------------------

def tiny_llama_dir(path, tokenizer_json, vocab_size):
  """A Hugging Face LLaMA directory: 1 layer of width 8, zero weights, and the tokenizer."""
  os.makedirs(path)
  C, F = 8, 16
  config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
            "hidden_size": C, "intermediate_size": F, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "vocab_size": vocab_size, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "float32"}
  shapes = {"model.embed_tokens.weight": [vocab_size, C], "model.norm.weight": [C],
            "lm_head.weight": [vocab_size, C]}
  for name, shape in [("input_layernorm", [C]), ("post_attention_layernorm", [C]),
                      ("self_attn.q_proj", [C, C]), ("self_attn.k_proj", [C, C]),
                      ("self_attn.v_proj", [C, C]), ("self_attn.o_proj", [C, C]),
                      ("mlp.gate_proj", [F, C]), ("mlp.up_proj", [F, C]),
                      ("mlp.down_proj", [C, F])]:
    shapes[f"model.layers.0.{name}.weight"] = shape
  header, offset = {"__metadata__": {"format": "pt"}}, 0
  for name, shape in shapes.items():
    n = 4 * shape[0] * (shape[1] if len(shape) > 1 else 1)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
    offset += n
  h = json.dumps(header).encode()
  with open(os.path.join(path, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(offset))
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tokenizer_json, f, ensure_ascii=False)


def write_back(args, name, j, path, work):
  """The written tokenizer of the file at path (see --round-trip) and its attnlab spec; exits on
  an error."""
  out = os.path.join(work, "rt-" + name)
  if args.writer:
    cmds, written = [[args.writer, "hf:" + path, out + ".json"]], out + ".json"
  else:
    vocab = max(list(j["model"]["vocab"].values()) + [t["id"] for t in j["added_tokens"]]) + 1
    tiny_llama_dir(out + "-hf", j, vocab)
    cmds = [[args.attnlab, "convert", out + "-hf", out + "-attnlab", "--to", "attnlab"],
            [args.attnlab, "convert", out + "-attnlab", out + "-back", "--to", "hf"]]
    written = os.path.join(out + "-back", "tokenizer.json")
  for cmd in cmds:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
      sys.exit(f"{' '.join(cmd)} failed: {r.stderr}")
  if args.writer:
    return Tokenizer.from_file(written), "hf:" + written
  back = out + "-back"
  gpt2_form = os.path.exists(os.path.join(back, "vocab.json"))
  if not gpt2_form and not os.path.exists(written):
    sys.exit(f"{name}: convert wrote no tokenizer files into {back}: {r.stdout.strip()}")
  with open(os.path.join(back, "tokenizer_config.json")) as f:
    tc = json.load(f)
  if not gpt2_form:
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast", tc
    return Tokenizer.from_file(written), "hf:" + written
  # The GPT-2 form, vocab.json + merges.txt: the pipeline GPT2TokenizerFast builds from them, with
  # the special tokens the original had.
  assert tc["tokenizer_class"] == "GPT2Tokenizer", tc
  tok = Tokenizer(models.BPE.from_file(os.path.join(back, "vocab.json"),
                                       os.path.join(back, "merges.txt")))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([tokenizers.AddedToken(t["content"], special=True, normalized=False)
                          for t in j["added_tokens"]])
  return tok, "gpt2:" + back


ATTNLAB_EVERY = 10


def round_trip(args, files, groups, work):
  print(f"{'tokenizer':27} {'texts':>9} {'bytes':>11} {'encodes':>9} {'id mism.':>8} "
        f"{'decode mism.':>12} {'skipped':>7}")
  failures = 0
  for name, j in files.items():
    path = os.path.join(work, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump(j, f, ensure_ascii=False)
    copy, written_spec = write_back(args, name, j, path, work)
    original = Tokenizer.from_file(path)
    for group, texts in groups.items():
      if group == "code points" and name.startswith("sp-"):
        continue
      n_bytes = n_enc = id_bad = dec_bad = skipped = 0
      for i, (label, data) in enumerate(texts):
        # attnlab reads the written file back alike (one text in ATTNLAB_EVERY: a process each).
        if group == "adversarial" and i % ATTNLAB_EVERY == 0 and run_attnlab(
            args.attnlab, written_spec, data)[0] != run_attnlab(args.attnlab, "hf:" + path, data)[0]:
          id_bad += 1
          print(f"  ATTNLAB MISMATCH {name} {label}: {data[:60]!r}")
        try:
          text = data.decode("utf-8")
        except UnicodeDecodeError:
          skipped += 1  # the library takes str only
          continue
        n_bytes += len(data)
        for special_text in (False, True):
          original.encode_special_tokens = copy.encode_special_tokens = special_text
          for add in (False, True):
            ours, theirs = copy.encode(text, add_special_tokens=add).ids, \
                original.encode(text, add_special_tokens=add).ids
            n_enc += 1
            if ours != theirs:
              id_bad += 1
              if id_bad <= 3:
                print(f"  MISMATCH {name} {label} add_special_tokens={add} "
                      f"encode_special_tokens={special_text}: {data[:60]!r}\n"
                      f"    written  {ours[:20]}\n    original {theirs[:20]}")
            elif copy.decode(ours, skip_special_tokens=False) != original.decode(
                theirs, skip_special_tokens=False):
              dec_bad += 1
      failures += id_bad + dec_bad
      print(f"{name + ' / ' + group:27} {len(texts):9,} {n_bytes:11,} {n_enc:9,} {id_bad:8} "
            f"{dec_bad:12} {skipped:7}")
  print("the written files encode and decode as the originals" if failures == 0
        else f"{failures} encodes differ")
  return 1 if failures else 0


# ---- main --------------------------------------------------------------------------------------

def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--attnlab", required=True, help="attnlab binary (its `tokenize` command)")
  ap.add_argument("--bench-exe", help="bench_tokenizer binary, for the encoding speed")
  ap.add_argument("--mb-per-file", type=float, default=0.5, help="test text per corpus file")
  ap.add_argument("--train-mb-per-file", type=float, default=0.3)
  ap.add_argument("--vocab", type=int, default=4000)
  ap.add_argument("--work", help="where the tokenizer.json files go (default: a temp dir)")
  ap.add_argument("--all-code-points", action="store_true")
  ap.add_argument("--round-trip", action="store_true", help="check the tokenizer.json writer")
  ap.add_argument("--writer", help="with --round-trip: EXE hf:<in> <out.json>, instead of convert")
  args = ap.parse_args()
  rng = random.Random(20261207)
  work = args.work or tempfile.mkdtemp(prefix="hf_tokenizer_check_")
  os.makedirs(work, exist_ok=True)
  data_dir = shared_data_dir()
  train_text, samples = read_corpus(data_dir, int(args.train_mb_per_file * 1e6),
                                    int(args.mb_per_file * 1e6))
  print(f"tokenizers {tokenizers.__version__}; training on {len(train_text.encode()):,} bytes; "
        f"files in {work}")
  files, n_extra = byte_level_files(train_text, args.vocab, rng)
  files.update(sentencepiece_files(train_text, args.vocab))
  corpus_texts = [(n, c) for n, s in samples for c in chunks(s)]
  groups = {"corpus": corpus_texts,
            "synthetic": [("synthetic", c) for c in chunks(stress_text(rng, 600_000))],
            "adversarial": adversarial_texts()}
  if args.all_code_points:
    groups["code points"] = [("code points", c) for c in chunks(all_code_points_text())]
  for texts in groups.values():
    assert not any(b"\0" in data for _, data in texts), "a command line cannot hold NUL"
  print(f"byte-level vocabularies: {args.vocab} trained + {n_extra} tokens no merge builds")
  if args.round_trip:
    return round_trip(args, files, groups, work)

  failures = 0
  corpus_file = os.path.join(work, "corpus_sample.txt")
  with open(corpus_file, "wb") as f:
    f.write(b"".join(s for _, s in samples))
  print(f"{'tokenizer':27} {'texts':>9} {'bytes':>11} {'tokens':>10} {'id mism.':>8} "
        f"{'decode mism.':>12} {'lossy':>5}")
  for name, j in files.items():
    path = os.path.join(work, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump(j, f, ensure_ascii=False)
    family = "sentencepiece" if name.startswith("sp-") else "byte-level"
    prefix = "metaspace" if "metaspace" in name else "prepend"
    ref = Reference(path, family)
    for group, texts in groups.items():
      if group == "code points" and family != "byte-level":
        continue
      n_bytes = n_tokens = id_bad = dec_bad = lossy = 0
      for label, data in texts:
        ours, pieces = run_attnlab(args.attnlab, "hf:" + path, data)
        theirs = ref.encode(data)
        n_bytes += len(data)
        n_tokens += len(theirs)
        if ours != theirs:
          id_bad += 1
          if id_bad <= 3:
            print(f"  MISMATCH {name} {label}: {data[:60]!r}\n    ours   {ours[:20]}\n"
                  f"    theirs {theirs[:20]}")
        want = expected_pieces(family, prefix, data)
        if want is None:
          lossy += 1
        elif b"".join(pieces) != want:
          dec_bad += 1
          if dec_bad <= 3:
            print(f"  DECODE {name} {label}: {data[:60]!r} -> {b''.join(pieces)[:60]!r}")
      failures += id_bad + dec_bad
      print(f"{name + ' / ' + group:27} {len(texts):9,} {n_bytes:11,} {n_tokens:10,} "
            f"{id_bad:8} {dec_bad:12} {lossy:5}")
    if args.bench_exe:
      r = subprocess.run([args.bench_exe, "bench", "hf:" + path, corpus_file, "1", "3"],
                         capture_output=True, text=True, check=True)
      fields = dict(kv.split("=") for kv in r.stdout.split() if "=" in kv)
      mb, tokens = int(fields["bytes"]) / 1e6, int(fields["tokens"])
      texts = [data.decode("utf-8") for _, data in corpus_texts]
      t0 = time.perf_counter()
      hf_tokens = sum(len(e.ids) for e in ref.tok.encode_batch(texts, add_special_tokens=False))
      hf_s = time.perf_counter() - t0
      print(f"  speed {name}: attnlab {tokens / (mb / float(fields['cold_MB/s'])) / 1e6:.2f} M "
            f"tokens/s cold, {tokens / (mb / float(fields['warm_MB/s'])) / 1e6:.2f} M warm "
            f"({fields['cold_MB/s']} / {fields['warm_MB/s']} MB/s); tokenizers encode_batch "
            f"{hf_tokens / hf_s / 1e6:.2f} M tokens/s ({mb / hf_s:.2f} MB/s), one thread")
  print("all ids and decodes agree" if failures == 0 else f"{failures} texts differ")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
