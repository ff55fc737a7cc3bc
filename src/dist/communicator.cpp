#include "dist/communicator.h"

namespace attnlab {

void LocalCommunicator::all_reduce_sum(const Tensor& t) {
  ATTN_REQUIRE(!t.empty() || t.numel() == 0, "all_reduce_sum: tensor %s has no data",
               t.str().c_str());
}

void LocalCommunicator::broadcast(const Tensor& t, int root) {
  ATTN_REQUIRE(root == 0, "broadcast: root rank %d out of range (world size 1)", root);
  ATTN_REQUIRE(!t.empty() || t.numel() == 0, "broadcast: tensor %s has no data", t.str().c_str());
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
  if (backend == "none") return std::make_unique<LocalCommunicator>();
  if (backend == "nccl" || backend == "mpi")
    ATTN_FAIL("distributed backend '%s' is not supported yet (use 'none' for one process)",
              backend.c_str());
  ATTN_FAIL("unknown distributed backend '%s' (valid: none; reserved: nccl, mpi)", backend.c_str());
}

}  // namespace attnlab
