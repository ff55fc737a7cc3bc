// The start-up check that every rank resolved the same run: rank 0's (key, value-hash) list is
// broadcast, each rank compares its own, and the count of differing keys is summed, so either
// every rank passes or every rank throws (no rank is left waiting in a collective). A rank with
// differences names the keys and its values; the others say which ranks differ.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "data/loader.h"
#include "dist/communicator.h"

namespace attnlab {

using RunFacts = std::vector<std::pair<std::string, std::string>>;  // key, value (text)

// Every leaf of the resolved recipe ("optim.lr" -> "0.0006"), and per data source its name, token
// count and a fingerprint of 4096 tokens spread over it ("data.train[0]" -> "...").
RunFacts run_facts(const Recipe& recipe, const std::vector<const DataLoader*>& loaders);

// Thrown on every rank together, so the caller need not end the job: each rank reports its own.
class RunMismatchError : public Error {
 public:
  using Error::Error;
};

// `what` names what differs in the messages ("recipe or data"), `hint` what to do about it.
void check_same_run(Communicator& comm, const RunFacts& facts, const char* what = "recipe or data",
                    const char* hint =
                        "start every rank with the same recipe, --set overrides "
                        "and data");

// A hash of 4096 values spread over `params` (any device and dtype) and their count: ranks that
// loaded different weights (a --resume from another checkpoint on one node) differ here.
std::string params_fingerprint(const Tensor& params);

}  // namespace attnlab
