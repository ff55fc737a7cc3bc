// RoPE's scaled frequencies against transformers bitwise: inv_freq of LlamaRotaryEmbedding
// (transformers 5.17.0, torch 2.11.0, 2026-12-07) as fp32 bit patterns, for llama3 at original
// contexts where a plain division instead of torch's reciprocal-times-scalar differs by an ulp
// (32768 at D 128; 8000, factor 32; 100 at D 64), and linear. Produced on the GPU host by
//   cfg = LlamaConfig(hidden_size=2 D, num_attention_heads=2, rope_theta=theta,
//                     rope_scaling=dict(rope_type=..., factor=..., ...))
//   LlamaRotaryEmbedding(cfg).inv_freq  -> struct.pack("<f", v) as uint32
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/position/rope.cuh"

namespace attnlab {
namespace {

struct GoldenCase {
  int head_dim;
  float theta;
  RopeScaling scaling;
  std::vector<uint32_t> bits;
};

RopeScaling llama3(float factor, int original_context) {
  RopeScaling s;
  s.type = RopeScalingType::llama3;
  s.factor = factor;
  s.original_context = original_context;
  return s;
}

TEST(RopeScalingGolden, MatchesTransformersBitwise) {
  RopeScaling linear;
  linear.type = RopeScalingType::linear;
  linear.factor = 3.f;
  const std::vector<GoldenCase> cases = {
      {128,
       500000.f,
       llama3(8.f, 32768),
       {
           0x3f800000u, 0x3f508ac1u, 0x3f29e1c6u, 0x3f0a6384u, 0x3ee177bcu, 0x3eb7ab7du,
           0x3e959ee3u, 0x3e73c461u, 0x3e4693b0u, 0x3e21c3a0u, 0x3e03c6a0u, 0x3dd6b19cu,
           0x3daee4adu, 0x3d8e7898u, 0x3d681e67u, 0x3d3d1684u, 0x3d1a08c8u, 0x3cfaf53fu,
           0x3ccc6f49u, 0x3ca68939u, 0x3c87a9c3u, 0x3c5d06ecu, 0x3c340d6du, 0x3c12ac7fu,
           0x3beef74fu, 0x3bc2aa76u, 0x3b9e9402u, 0x3b812e35u, 0x3b527720u, 0x3b2b72dcu,
           0x3b0baa41u, 0x3ae38c10u, 0x3ab95d21u, 0x3a970023u, 0x3a7603eau, 0x3a47a5efu,
           0x39fee2a5u, 0x39a0ec92u, 0x3948308eu, 0x38f3e0cau, 0x38901151u, 0x3822414eu,
           0x37bed4f4u, 0x379b7475u, 0x377d45c3u, 0x374e51f5u, 0x3728126bu, 0x3708ea0fu,
           0x36df10c4u, 0x36b5b687u, 0x369406cbu, 0x36712b80u, 0x36447610u, 0x36200a69u,
           0x36025f34u, 0x35d46808u, 0x35ad07a7u, 0x358cf400u, 0x3565a54du, 0x353b12c7u,
           0x351864a7u, 0x34f848c2u, 0x34ca41b0u, 0x34a4c2ffu,
       }},
      {128,
       500000.f,
       llama3(32.f, 8000),
       {
           0x3f800000u, 0x3f508ac1u, 0x3f29e1c6u, 0x3f0a6384u, 0x3ee177bcu, 0x3eb7ab7du,
           0x3e959ee3u, 0x3e73c461u, 0x3e4693b0u, 0x3e21c3a0u, 0x3e03c6a0u, 0x3dd6b19cu,
           0x3daee4adu, 0x3d8e7898u, 0x3d681e67u, 0x3d3d1684u, 0x3d1a08c8u, 0x3cfaf53fu,
           0x3ccc6f49u, 0x3ca68939u, 0x3c87a9c3u, 0x3c5d06ecu, 0x3c340d6du, 0x3c12ac7fu,
           0x3beef74fu, 0x3bc2aa76u, 0x3b9e9402u, 0x3b812e35u, 0x3b527720u, 0x3b0667f2u,
           0x3aa347dau, 0x3a40197eu, 0x39d6dd50u, 0x395bda16u, 0x38b95f28u, 0x37c86886u,
           0x37a3418du, 0x3784fdbfu, 0x3758ac81u, 0x37308199u, 0x370fc8f8u, 0x36ea426fu,
           0x36bed4f4u, 0x369b7475u, 0x367d45c3u, 0x364e51f5u, 0x3628126bu, 0x3608ea0fu,
           0x35df10c4u, 0x35b5b687u, 0x359406cbu, 0x35712b80u, 0x35447610u, 0x35200a69u,
           0x35025f34u, 0x34d46808u, 0x34ad07a7u, 0x348cf400u, 0x3465a54du, 0x343b12c7u,
           0x341864a7u, 0x33f848c2u, 0x33ca41b0u, 0x33a4c2ffu,
       }},
      {64,
       10000.f,
       llama3(8.f, 100),
       {
           0x3f800000u, 0x3f3ff911u, 0x3f0ff59au, 0x3ed7e89bu, 0x3ea1e89bu, 0x3e62d55au,
           0x3defef41u, 0x3d7714f3u, 0x3cf3bdaau, 0x3c5eeaa6u, 0x3be655c2u, 0x3bacba15u,
           0x3b8186e3u, 0x3b42434fu, 0x3b11ad39u, 0x3ada7bf2u, 0x3aa3d70au, 0x3a75b9b0u,
           0x3a38449cu, 0x3a0a2e77u, 0x39cf3e38u, 0x399b690du, 0x39691528u, 0x392ec98eu,
           0x3903126fu, 0x38c4948cu, 0x38936a16u, 0x385d1725u, 0x3825cb60u, 0x37f8a815u,
           0x37ba7753u, 0x378bd472u,
       }},
      {64,
       10000.f,
       linear,
       {
           0x3eaaaaabu, 0x3e7ff6c1u, 0x3e3ff223u, 0x3e0ff067u, 0x3dd7e0cfu, 0x3da1e2c2u,
           0x3d72cb5fu, 0x3d3611f4u, 0x3d088889u, 0x3cccc567u, 0x3c998e81u, 0x3c664d71u,
           0x3c2cb3d9u, 0x3c018235u, 0x3bc23c4cu, 0x3b91a7f7u, 0x3b5a740du, 0x3b23d120u,
           0x3af5b0d0u, 0x3ab83df4u, 0x3a8a297bu, 0x3a4f36bcu, 0x3a1b6370u, 0x39e90cbdu,
           0x39aec33fu, 0x39830db3u, 0x39448d73u, 0x391364c3u, 0x38dd0f2bu, 0x38a5c563u,
           0x38789f19u, 0x383a7098u,
       }}};
  for (const GoldenCase& c : cases) {
    ASSERT_EQ(int(c.bits.size()), c.head_dim / 2);
    for (int i = 0; i < c.head_dim / 2; ++i) {
      const float v = rope_inv_freq(i, c.head_dim, c.theta, c.scaling);
      uint32_t u;
      std::memcpy(&u, &v, sizeof(u));
      EXPECT_EQ(u, c.bits[size_t(i)]) << "D " << c.head_dim << " i " << i << ": " << v;
    }
  }
}

}  // namespace
}  // namespace attnlab
