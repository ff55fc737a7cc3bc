// Shared by the interop tests (test_model_source.cpp, test_llmc.cpp): a tiny GPT-2 shape and a
// CPU model of it, and a value pattern that makes a wrong name, transpose or offset show.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "interop/foreign_tensors.h"
#include "model/gpt.h"

namespace attnlab::interop_test {

constexpr int L = 2, C = 8, V = 258, P = 16, NH = 2;

inline GPTConfig tiny_config() {
  GPTConfig c;
  c.n_layer = L;
  c.n_head = NH;
  c.n_embd = C;
  c.vocab_size = V;
  c.padded_vocab = 384;
  c.block_size = P;
  return c;
}

// A store of `cfg` on the CPU in f32 with every role trainable, initialised from `seed`.
struct Model {
  GPT gpt;
  ParameterStore store;
  Model(const GPTConfig& cfg, uint64_t seed) : gpt(cfg) {
    gpt.declare_params(store);
    store.finalize(Device::cpu, DType::f32,
                   {ParamRole::base, ParamRole::attention, ParamRole::adapter});
    gpt.init_params(store, seed);
  }
  std::vector<float> get(const std::string& n) const { return tensor_to_host_f32(store.param(n)); }
};

// A tensor of a foreign file as the tests write it: its name there, shape and values.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

inline Shape shape_of(const std::vector<int64_t>& v) {
  Shape s;
  s.ndim = int(v.size());
  for (int i = 0; i < s.ndim; ++i) s.dims[i] = v[size_t(i)];
  return s;
}

inline const HfTensor& find(const std::vector<HfTensor>& ts, const std::string& n) {
  for (const auto& t : ts)
    if (t.name == n) return t;
  throw std::runtime_error("no " + n);
}

// A distinct value per tensor and element, so a wrong name, transpose or offset shows.
inline float pattern(int tensor, int64_t i) { return float(tensor) + 0.001f * float(i % 997); }

}  // namespace attnlab::interop_test
