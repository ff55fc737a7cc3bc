// The precision `eval` and `score` default to on CUDA (source_precision): what an attnlab run
// computed in, whatever its recipe's train.precision says; the weights' dtype without a trainer
// state; fp32 for Hugging Face and llm.c models. Decided on the host, so tested on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "eval/eval_model.h"
#include "eval_test_util.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace attnlab;

TEST(EvalPrecision, TheRunsOwnPrecisionElseTheWeightsElseFp32) {
  // A CPU run whose recipe keeps the default train.precision bf16: it computed in fp32.
  const std::string run = test::make_run("precision", 64, "byte");
  ModelSource src = inspect_model_source(run);
  ASSERT_EQ(parse_recipe(src.recipe_yaml, "recipe.yaml").train.precision, Precision::bf16);
  EXPECT_EQ(source_precision(src), Precision::fp32);

  // A run that computed in bf16 (its trainer state says so, as a CUDA run's does).
  const fs::path state = fs::path(src.weights_path) / "trainer_state.json";
  std::string js = io::read_file(state.string());
  const size_t at = js.find("\"f32\"");
  ASSERT_NE(at, std::string::npos) << js;
  std::ofstream(state) << js.replace(at, 5, "\"bf16\"");
  EXPECT_EQ(source_precision(src), Precision::bf16);

  // No trainer state (a converted model, an older checkpoint): the weights' dtype.
  fs::remove(state);
  EXPECT_EQ(source_precision(src), Precision::fp32);  // the CPU run's f32 weights
  const std::string dir = run + "/bf16-weights";
  fs::create_directories(dir);
  std::vector<uint16_t> bits(16, 0x3f80);  // bf16 ones
  io::SafetensorsWriter w;
  w.add("wte.weight", Tensor(bits.data(), DType::bf16, Device::cpu, Shape{4, 4}));
  w.write(dir + "/model.safetensors");
  ModelSource bf = src;
  bf.weights_path = dir;
  EXPECT_EQ(source_precision(bf), Precision::bf16);

  // Foreign formats: fp32.
  ModelSource hf = src, llmc = src;
  hf.format = ModelFormat::hf;
  llmc.format = ModelFormat::llmc;
  EXPECT_EQ(source_precision(hf), Precision::fp32);
  EXPECT_EQ(source_precision(llmc), Precision::fp32);
  fs::remove_all(run);
}
