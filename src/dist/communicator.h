// Communicator: the collective operations data parallelism needs, behind one small interface so
// that training code is written once for one process or many (DESIGN.md "Several processes").
// Ranks count from 0; rank 0 writes logs and checkpoints. Collectives are in place on a Tensor
// that lives on the device the backend serves; every rank must call them in the same order.
#pragma once
#include <memory>
#include <string>

#include "core/tensor.h"

namespace attnlab {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_root() const { return rank() == 0; }
  virtual const char* backend() const = 0;

  // t = sum of t over all ranks (every rank gets the result).
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // t = t of rank `root` on every rank.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;
};

// A single process: world size 1, rank 0; the collectives are identities (argument checks only).
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "none"; }
  void all_reduce_sum(const Tensor& t) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override {}
};

// Backend by name: "none" (single process). "nccl" and "mpi" are reserved and not supported yet;
// any other name throws listing the valid ones.
std::unique_ptr<Communicator> make_communicator(const std::string& backend);

}  // namespace attnlab
