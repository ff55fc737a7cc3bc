// One training run's state (the context, communicator, model, parameters, data) and the steps
// that build it from a recipe; src/train/trainer.cpp runs the training loop over it.
#pragma once

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/context.h"
#include "core/parameters.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "eval/synthetic_probe.h"
#include "eval/validation.h"
#include "io/logger.h"
#include "model/gpt.h"

namespace attnlab::train_session {

// Everything a run (train or eval) needs, built from the recipe.
struct Session {
  std::unique_ptr<ExecContext> ctx;
  std::unique_ptr<Communicator> comm;
  DType dtype = DType::f32;
  std::unique_ptr<GPT> model;
  ParameterStore store;
  std::unique_ptr<DataLoader> train_loader, val_loader;
  std::unique_ptr<SyntheticProbe> val_probe;  // synthetic data: the retrieval metrics
  double unigram_baseline = std::nan("");
  int64_t unigram_tokens = 0;  // the validation tokens it was taken over (the first ones)
  std::string tokenizer_json;
  // The start model's generation_config.json (CheckpointContents::generation_config_json).
  std::string generation_config_json;
  // Where it came from: data.tokenizer, or the tokenizer.json beside the shards ("" for none).
  std::string tokenizer_spec;
  std::vector<std::string> data_warnings;  // from setup_data, printed by the trainer
  Buffer batch_dev;                        // device copies of tokens and targets
  Tensor tokens_dev, targets_dev;
  TrainingMemoryEstimate memory;  // of `attnlab info`, for out-of-memory errors
};

void setup_device(const Recipe& r, Session& s, const LaunchInfo& launch);
std::unique_ptr<Communicator> setup_comm(const Recipe& r, const Session& s,
                                         const LaunchInfo& launch);
// Validation over every rank's windows: the loss of all the scored targets.
ValidationResult global_validation(Communicator& comm, ValidationResult v);
void setup_data(const Recipe& r, Session& s, bool need_train);
// The device-memory estimate of `attnlab info` for this run (ZeRO-1 keeps 1 / world of the
// optimizer state and fp32 master on each rank).
TrainingMemoryEstimate memory_estimate(const Recipe& r, const Session& s);
// Start-up out-of-memory check: the estimate against the free device memory, before anything
// large is allocated (a clear message instead of a failed cudaMalloc later).
void check_device_memory(const Recipe& r, const Session& s, const TrainingMemoryEstimate& est);
// Test hook ATTNLAB_TEST_OOM=<rank>:<step> (docs/distributed.md, "Faults"; session.cpp).
void test_hook_out_of_memory(const Session& s, int64_t step, const TrainingMemoryEstimate& est);
void setup_model(const Recipe& r, Session& s);
void upload(Session& s, const int32_t* inputs, const int32_t* targets);
// What the attention variants add to an evaluation (their metrics into `record`, health
// warnings, the loss under their alternate eval mode); the text for the eval line.
std::string attention_eval_report(Session& s, int batches, const io::Logger& log,
                                  nlohmann::json& record);
std::string roles_text(const std::vector<std::string>& roles);

}  // namespace attnlab::train_session
