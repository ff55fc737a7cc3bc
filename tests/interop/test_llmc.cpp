// llm.c checkpoint files (interop/llmc.h) written here with known values: the header's mapping
// to the model, each array's names and offsets, the refusals of truncated, unknown and non-finite
// files, and the exporter's bit-exact round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "interop/interop_test_util.h"
#include "interop/llmc.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace attnlab;
using namespace attnlab::interop_test;

namespace {

// An llm.c file of tiny_config() (Vp = 384 > V) whose every parameter is pattern(array, index)
// (padding rows of wte included). Returns the arrays by llm.c name.
std::map<std::string, std::vector<float>> write_llmc_file(const std::string& path, int version) {
  const int64_t Vp = 384;
  std::vector<std::pair<std::string, int64_t>> arrays = {{"wte", Vp * C},
                                                         {"wpe", P * C},
                                                         {"ln1w", L * C},
                                                         {"ln1b", L * C},
                                                         {"qkvw", L * 3 * C * C},
                                                         {"qkvb", L * 3 * C},
                                                         {"attprojw", L * C * C},
                                                         {"attprojb", L * C},
                                                         {"ln2w", L * C},
                                                         {"ln2b", L * C},
                                                         {"fcw", L * 4 * C * C},
                                                         {"fcb", L * 4 * C},
                                                         {"fcprojw", L * 4 * C * C},
                                                         {"fcprojb", L * C},
                                                         {"lnfw", C},
                                                         {"lnfb", C}};
  std::array<int32_t, 256> h{};
  h[0] = kLlmcMagic;
  h[1] = version;
  h[2] = P;
  h[3] = V;
  h[4] = L;
  h[5] = NH;
  h[6] = C;
  h[7] = int32_t(Vp);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(h.data()), sizeof(h));
  std::map<std::string, std::vector<float>> out;
  int k = 0;
  for (const auto& [n, numel] : arrays) {
    std::vector<float> v(static_cast<size_t>(numel));
    // bf16-exact values for version 5: small integers / 8
    for (int64_t i = 0; i < numel; ++i) v[size_t(i)] = float(k) + float(i % 8) / 8.f;
    if (version == 3) {
      f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
    } else {
      for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        const uint16_t b = uint16_t(u >> 16);
        f.write(reinterpret_cast<const char*>(&b), 2);
      }
    }
    out[n] = std::move(v);
    ++k;
  }
  return out;
}

std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t n) {
  return {v.begin() + begin, v.begin() + begin + n};
}

}  // namespace

TEST(Llmc, HeaderMapsToConfigAndArraysToNames) {
  const test::TempDir tmp("llmc");
  for (int version : {3, 5}) {
    const std::string path = (tmp.path() / strformat("m%d.bin", version)).string();
    auto arrays = write_llmc_file(path, version);
    const ModelSource s = inspect_model_source(path);
    ASSERT_EQ(s.format, ModelFormat::llmc);
    EXPECT_EQ(s.config.n_layer, L);
    EXPECT_EQ(s.config.n_head, NH);
    EXPECT_EQ(s.config.n_embd, C);
    EXPECT_EQ(s.config.vocab_size, V);
    EXPECT_EQ(s.config.block_size, P);
    EXPECT_TRUE(s.config.tied_embeddings);
    Model m(s.config, 3);
    load_model_source(s, m.store);
    // wte: the V real rows, then attnlab's padding (zero), not llm.c's padding rows
    const std::vector<float> wte = m.get("wte.weight");
    for (int64_t i = 0; i < 384 * C; ++i)
      ASSERT_EQ(wte[size_t(i)], i < V * C ? arrays["wte"][size_t(i)] : 0.f) << i;
    EXPECT_EQ(m.get("h.1.attn.c_attn.weight"), slice(arrays["qkvw"], 3 * C * C, 3 * C * C));
    EXPECT_EQ(m.get("h.1.attn.c_attn.bias"), slice(arrays["qkvb"], 3 * C, 3 * C));
    EXPECT_EQ(m.get("h.0.mlp.c_proj.weight"), slice(arrays["fcprojw"], 0, 4 * C * C));
    EXPECT_EQ(m.get("h.1.ln_2.bias"), slice(arrays["ln2b"], C, C));
    EXPECT_EQ(m.get("ln_f.bias"), arrays["lnfb"]);
    EXPECT_EQ(m.get("wpe.weight"), arrays["wpe"]);
  }
}

TEST(Llmc, TruncatedFileAndBadVersionAreRefused) {
  const test::TempDir tmp("llmc");
  const std::string path = (tmp.path() / "m.bin").string();
  write_llmc_file(path, 3);
  fs::resize_file(path, fs::file_size(path) - 4);
  test::expect_error([&] { inspect_model_source(path); }, {path, "bytes", "needs"});
  write_llmc_file(path, 4);
  test::expect_error([&] { inspect_model_source(path); }, {"version 4"});
  // A NaN weight (here wte's first value) is refused as in attnlab's own files.
  write_llmc_file(path, 3);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(1024 + 8);
    const float nan = std::nanf("");
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  const ModelSource s = inspect_model_source(path);
  Model m(s.config, 1);
  test::expect_error([&] { load_model_source(s, m.store); },
                     {"tensor 'llm.c wte' holds a non-finite value", "flat index 2"});
}

TEST(Llmc, ExportRoundTripsBitExactAndRefusesWhatLlmcCannotHold) {
  const test::TempDir tmp("llmc");
  const std::string path = (tmp.path() / "m.bin").string();
  write_llmc_file(path, 3);
  const ModelSource s = inspect_model_source(path);
  Model m(s.config, 3);
  load_model_source(s, m.store);
  const std::string back = (tmp.path() / "back.bin").string();
  write_llmc(m.store, s.config, back);
  // llm.c's own padding rows are not kept (attnlab's are zero): compare the rest byte for byte.
  const std::string a = io::read_file(path), b = io::read_file(back);
  ASSERT_EQ(a.size(), b.size());
  const size_t wte_begin = 1024, real = size_t(V) * C * 4, pad_end = 1024 + size_t(384) * C * 4;
  EXPECT_EQ(a.substr(0, wte_begin + real), b.substr(0, wte_begin + real));
  EXPECT_EQ(a.substr(pad_end), b.substr(pad_end));
  EXPECT_EQ(b.substr(wte_begin + real, pad_end - wte_begin - real),
            std::string(pad_end - wte_begin - real, '\0'));

  GPTConfig untied = tiny_config();
  untied.tied_embeddings = false;
  Model mu(untied, 1);
  test::expect_error([&] { write_llmc(mu.store, untied, back + "2"); }, {"untied head"});
  GPTConfig nobias = tiny_config();
  nobias.bias = false;
  Model mb(nobias, 1);
  test::expect_error([&] { write_llmc(mb.store, nobias, back + "3"); }, {"no biases"});
  GPTConfig eps = tiny_config();  // llm.c has no field for it: its readers take 1e-5
  eps.norm_eps = 1e-3f;
  Model me(eps, 1);
  test::expect_error([&] { write_llmc(me.store, eps, back + "4"); }, {"model.norm_eps 0.001"});
}
