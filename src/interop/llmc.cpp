#include "interop/llmc.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

struct LlmcHeader {
  int version = 3, maxT = 0, V = 0, L = 0, NH = 0, C = 0, Vp = 0;
  size_t elem() const { return version == 5 ? 2 : 4; }
};

std::array<int32_t, 256> read_raw_header(const std::string& path) {
  std::array<int32_t, 256> h{};
  std::ifstream in(path, std::ios::binary);
  ATTN_REQUIRE(in, "cannot open llm.c checkpoint '%s'", path.c_str());
  in.read(reinterpret_cast<char*>(h.data()), sizeof(h));
  ATTN_REQUIRE(in.gcount() == std::streamsize(sizeof(h)),
               "llm.c checkpoint '%s' is shorter than its 1024-byte header", path.c_str());
  return h;
}

LlmcHeader read_header(const std::string& path) {
  const auto h = read_raw_header(path);
  ATTN_REQUIRE(h[0] == kLlmcMagic, "'%s' is not an llm.c checkpoint (magic %d, expected %d)",
               path.c_str(), h[0], kLlmcMagic);
  LlmcHeader r{h[1], h[2], h[3], h[4], h[5], h[6], h[7]};
  ATTN_REQUIRE(r.version == 3 || r.version == 5,
               "llm.c checkpoint '%s' has version %d; attnlab reads 3 (fp32) and 5 (bf16)",
               path.c_str(), r.version);
  ATTN_REQUIRE(r.maxT > 0 && r.V > 0 && r.L > 0 && r.NH > 0 && r.C > 0 && r.Vp >= r.V,
               "llm.c checkpoint '%s' has an invalid header (max_seq_len %d, vocab_size %d, "
               "num_layers %d, num_heads %d, channels %d, padded_vocab_size %d)",
               path.c_str(), r.maxT, r.V, r.L, r.NH, r.C, r.Vp);
  return r;
}

// The parameter arrays in file order: name, elements per layer (or in all), per-layer count.
struct LlmcArray {
  const char* name;  // llm.c's name
  int64_t numel;     // per layer for layered arrays
  bool layered;
};
std::vector<LlmcArray> llmc_arrays(int64_t Vp, int64_t maxT, int64_t C) {
  return {{"wte", Vp * C, false},
          {"wpe", maxT * C, false},
          {"ln1w", C, true},
          {"ln1b", C, true},
          {"qkvw", 3 * C * C, true},
          {"qkvb", 3 * C, true},
          {"attprojw", C * C, true},
          {"attprojb", C, true},
          {"ln2w", C, true},
          {"ln2b", C, true},
          {"fcw", 4 * C * C, true},
          {"fcb", 4 * C, true},
          {"fcprojw", 4 * C * C, true},
          {"fcprojb", C, true},
          {"lnfw", C, false},
          {"lnfb", C, false}};
}

// attnlab name and shape of llm.c array `a`, layer l.
std::pair<std::string, std::vector<int64_t>> attnlab_name(const std::string& a, int l, int64_t V,
                                                          int64_t maxT, int64_t C) {
  const std::string h = "h." + std::to_string(l) + ".";
  if (a == "wte") return {"wte.weight", {V, C}};
  if (a == "wpe") return {"wpe.weight", {maxT, C}};
  if (a == "ln1w") return {h + "ln_1.weight", {C}};
  if (a == "ln1b") return {h + "ln_1.bias", {C}};
  if (a == "qkvw") return {h + "attn.c_attn.weight", {3 * C, C}};
  if (a == "qkvb") return {h + "attn.c_attn.bias", {3 * C}};
  if (a == "attprojw") return {h + "attn.c_proj.weight", {C, C}};
  if (a == "attprojb") return {h + "attn.c_proj.bias", {C}};
  if (a == "ln2w") return {h + "ln_2.weight", {C}};
  if (a == "ln2b") return {h + "ln_2.bias", {C}};
  if (a == "fcw") return {h + "mlp.c_fc.weight", {4 * C, C}};
  if (a == "fcb") return {h + "mlp.c_fc.bias", {4 * C}};
  if (a == "fcprojw") return {h + "mlp.c_proj.weight", {C, 4 * C}};
  if (a == "fcprojb") return {h + "mlp.c_proj.bias", {C}};
  if (a == "lnfw") return {"ln_f.weight", {C}};
  return {"ln_f.bias", {C}};
}

int round_up(int v, int m) { return (v + m - 1) / m * m; }

float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16_bits(float f) {  // round to nearest even (NaN stays NaN)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace

bool is_llmc_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), 4);
  return in.gcount() == 4 && magic == kLlmcMagic;
}

GPTConfig gpt_config_of_llmc(const std::string& path) {
  const LlmcHeader h = read_header(path);
  int64_t total = 0;
  for (const auto& a : llmc_arrays(h.Vp, h.maxT, h.C)) total += a.numel * (a.layered ? h.L : 1);
  const uintmax_t want = 1024 + uintmax_t(total) * h.elem();
  const uintmax_t have = fs::file_size(path);
  ATTN_REQUIRE(have == want,
               "llm.c checkpoint '%s' is %ju bytes; its header (version %d, %d layers, %d "
               "channels, vocab %d padded to %d, max_seq_len %d) needs %ju",
               path.c_str(), have, h.version, h.L, h.C, h.V, h.Vp, h.maxT, want);
  GPTConfig c;
  c.n_layer = h.L;
  c.n_head = h.NH;
  c.n_embd = h.C;
  c.vocab_size = h.V;
  c.padded_vocab = round_up(h.V, 128);
  c.block_size = h.maxT;
  c.norm_eps = 1e-5f;
  c.bias = true;
  c.tied_embeddings = true;
  try {
    c.validate();
  } catch (const Error& e) {  // name the file the shape came from
    ATTN_FAIL("llm.c checkpoint '%s': %s", path.c_str(), e.what());
  }
  return c;
}

ForeignCheckpoint read_llmc(const std::string& path, const GPTConfig& cfg) {
  const LlmcHeader h = read_header(path);
  ATTN_REQUIRE(h.L == cfg.n_layer && h.C == cfg.n_embd && h.V == cfg.vocab_size,
               "internal: llm.c config mismatch");
  ForeignCheckpoint out;
  out.path = path;
  uint64_t offset = 1024;
  const size_t elem = h.elem();
  for (const auto& a : llmc_arrays(h.Vp, h.maxT, h.C)) {
    const int layers = a.layered ? h.L : 1;
    for (int l = 0; l < layers; ++l) {
      auto [name, shape] = attnlab_name(a.name, l, h.V, h.maxT, h.C);
      ForeignTensor t;
      t.name = name;
      t.origin = a.layered ? strformat("llm.c %s[%d]", a.name, l) : strformat("llm.c %s", a.name);
      t.shape = shape;
      t.pad_rows = name == "wte.weight";
      if (t.pad_rows) t.min_rows = h.V;  // (the V rows read are every id's)
      int64_t n = 1;
      for (int64_t d : shape) n *= d;  // wte: the first V rows of Vp
      const uint64_t at = offset;
      t.read = [path, at, n, elem](float* dst) {
        std::ifstream in(path, std::ios::binary);
        in.seekg(std::streamoff(at));
        if (elem == 4) {
          in.read(reinterpret_cast<char*>(dst), std::streamsize(n * 4));
        } else {
          std::vector<uint16_t> tmp(static_cast<size_t>(n));
          in.read(reinterpret_cast<char*>(tmp.data()), std::streamsize(n * 2));
          for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(tmp[size_t(i)]);
        }
        ATTN_REQUIRE(in.gcount() == std::streamsize(n * int64_t(elem)),
                     "llm.c checkpoint '%s' ends early", path.c_str());
      };
      out.tensors.push_back(std::move(t));
      offset += uint64_t(a.numel) * elem;
    }
  }
  return out;
}

void write_llmc(const ParameterStore& store, const GPTConfig& cfg, const std::string& path,
                bool bf16) {
  const auto refuse = [&](const std::string& why) {
    ATTN_FAIL("cannot export to llm.c: %s", why.c_str());
  };
  if (cfg.norm != NormType::layernorm || cfg.mlp != MlpType::gelu ||
      cfg.position != PositionType::learned)
    refuse(
        strformat("the model's block (norm %s, mlp %s, position %s) is not llm.c's GPT-2 "
                  "(layernorm, gelu, learned)",
                  norm_name(cfg.norm), mlp_name(cfg.mlp), position_name(cfg.position)));
  if (cfg.mlp_hidden() != 4 * cfg.n_embd)
    refuse(strformat("the model's MLP is %d wide (model.mlp_hidden); llm.c's is 4 * n_embd = %d",
                     cfg.mlp_hidden(), 4 * cfg.n_embd));
  if (!cfg.tied_embeddings)
    refuse("the model has an untied head (lm_head.weight); llm.c ties the head to wte");
  if (!cfg.bias) refuse("the model has no biases (model.bias: false); llm.c's GPT-2 has them");
  if (cfg.norm_eps != 1e-5f)  // the format has no field for it: its readers take 1e-5
    refuse(strformat("the model's layer norms use model.norm_eps %g; llm.c's use 1e-5",
                     double(cfg.norm_eps)));
  if (cfg.n_kv_head != 0 && cfg.n_kv_head != cfg.n_head)
    refuse(strformat("the model uses grouped-query attention (n_kv_head %d, n_head %d)",
                     cfg.n_kv_head, cfg.n_head));
  if (cfg.attention.window != 0)
    refuse(strformat("the model uses a sliding attention window (%d)", cfg.attention.window));
  if (cfg.attention.type != "dense")
    refuse("the model uses attention '" + cfg.attention.type + "'; llm.c has dense attention");
  for (const auto& e : store.entries())
    if (e.spec.role != ParamRole::base)
      refuse("tensor '" + e.spec.name + "' (role " + role_name(e.spec.role) +
             ") has no place in llm.c's layout");

  const int64_t C = cfg.n_embd, V = cfg.vocab_size, maxT = cfg.block_size;
  const int64_t Vp = round_up(cfg.vocab_size, 128);
  std::array<int32_t, 256> header{};
  header[0] = kLlmcMagic;
  header[1] = bf16 ? 5 : 3;
  header[2] = int32_t(maxT);
  header[3] = int32_t(V);
  header[4] = cfg.n_layer;
  header[5] = cfg.n_head;
  header[6] = int32_t(C);
  header[7] = int32_t(Vp);
  io::AtomicFileWriter w(path);
  w.write(header.data(), sizeof(header));
  const auto put = [&](const std::vector<float>& v) {
    if (!bf16) {
      w.write(v.data(), v.size() * 4);
      return;
    }
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
    w.write(b.data(), b.size() * 2);
  };
  for (const auto& a : llmc_arrays(Vp, maxT, C)) {
    const int layers = a.layered ? cfg.n_layer : 1;
    for (int l = 0; l < layers; ++l) {
      const std::string name = attnlab_name(a.name, l, V, maxT, C).first;
      std::vector<float> v = tensor_to_host_f32(store.param(name));
      if (name == "wte.weight") v.resize(size_t(Vp * C), 0.f);  // llm.c's padding, zero
      ATTN_ASSERT(int64_t(v.size()) == a.numel);
      put(v);
    }
  }
  w.commit();
}

}  // namespace attnlab
