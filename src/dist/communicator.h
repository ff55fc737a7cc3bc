// Communicator: the collective operations data parallelism needs, behind one small interface so
// that training code is written once for one process or many (docs/distributed.md).
// Ranks count from 0; rank 0 writes logs and checkpoints. Every rank must call the collectives in
// the same order with the same sizes. Tensors live on the backend's device():
//   none: one process (identities; copies where send and recv differ); any device.
//   mpi:  CPU tensors (f32, i32, f64), blocking; each wait is bounded by timeout_s.
//   nccl: CUDA tensors (f32, bf16, i32, f64) enqueued on the communicator's own stream after the
//         work enqueued so far on the compute stream (an event); wait() makes the compute stream
//         wait for them. A watchdog thread polls ncclCommGetAsyncError and the age of the oldest
//         unfinished collective, and ends the job (ncclCommAbort) naming the rank past timeout_s.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/launch.h"

struct CUstream_st;

namespace attnlab {

enum class ReduceOp : uint8_t { sum, avg };

struct CommOptions {
  std::string backend = "none";  // none | mpi | nccl
  LaunchInfo launch;             // rank, world size, local rank, rendezvous address
  double timeout_s = 300.0;      // a collective (or the rendezvous) not done by then is fatal
  std::string rendezvous_file;   // nccl without MPI or MASTER_ADDR: the unique id by this file
  CUstream_st* compute_stream = nullptr;  // nccl: the stream the collectives order after
};

// Where a step's collectives lay in time (docs/distributed.md, "Overlap"), in milliseconds from
// begin_timeline(): each collective's start and end on the stream it ran on, and the points
// mark_timeline() recorded on the compute stream.
struct CommTimeline {
  struct Span {
    double start_ms = 0.0, end_ms = 0.0;
  };
  std::vector<Span> collectives;
  std::vector<double> marks_ms;
  bool blocking = true;  // the collectives blocked the host (mpi, none): nothing overlapped them
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_root() const { return rank() == 0; }
  virtual const char* backend() const = 0;

  // t = op over ranks of t, in place (every rank gets the result; avg = sum / world size).
  virtual void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  void all_reduce_sum(const Tensor& t) { all_reduce(t, ReduceOp::sum); }
  // send: [world * n]; recv: [n] = op over ranks of send[rank * n, (rank + 1) * n). recv may be
  // that slice of send (in place).
  virtual void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  // send: [n]; recv: [world * n], recv[r * n, (r + 1) * n) = send of rank r. send may be this
  // rank's slice of recv (in place).
  virtual void all_gather(const Tensor& send, const Tensor& recv) = 0;
  // t = t of rank `root` on every rank.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Every rank here; bounded by distributed.timeout_s, or by timeout_s where > 0 (rank 0 writing
  // a checkpoint may take longer than any collective of a step).
  virtual void barrier(double timeout_s = 0) = 0;
  // Orders the compute stream after every collective issued so far (nccl); no-op when blocking.
  virtual void wait() {}
  // Host values (counts, loss totals): values[i] = sum over ranks; blocking.
  virtual void all_reduce_host(double* values, int n) = 0;
  // Host bytes of rank `root` to every rank; blocking.
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  // Ends every rank of the job after a fatal error on this one: prints "rank R of W: message"
  // and aborts the job (MPI_Abort, ncclCommAbort + exit). Does not return.
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  // Timeline of the collectives (GradientSync's overlap report). Between begin_timeline() and
  // stop_timeline() every collective is timed; read_timeline() returns it once the work is done
  // (nccl waits for its events). Blocking backends use the wall clock around each call; nccl
  // overrides them with CUDA events: a collective's start is recorded on the communication stream
  // after it waited for the compute stream, its end after it, a mark on the compute stream.
  virtual void begin_timeline();
  virtual void mark_timeline();
  void stop_timeline() { timeline_on_ = false; }
  virtual CommTimeline read_timeline();

 protected:
  // For blocking backends: the wall clock around each collective while the timeline is on.
  void timeline_collective_start();
  void timeline_collective_end();
  bool timeline_on_ = false;

 private:
  std::chrono::steady_clock::time_point timeline_origin_, collective_start_;
  CommTimeline timeline_;
};

// A single process: world size 1, rank 0; the collectives are identities (argument checks only).
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "none"; }
  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override;
  void all_gather(const Tensor& send, const Tensor& recv) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier(double = 0) override {}
  void all_reduce_host(double*, int) override {}
  void broadcast_host(void*, size_t, int root) override;
  [[noreturn]] void abort(const std::string& message) override;
};

// Backend by options.backend: "none", "mpi", "nccl"; a backend this build lacks (no MPI or NCCL
// found by CMake) or an unknown name throws naming the valid ones.
std::unique_ptr<Communicator> make_communicator(const CommOptions& options);
std::unique_ptr<Communicator> make_communicator(const std::string& backend);  // default options
// The backends compiled in ("none, mpi, nccl" when both were found).
std::string available_backends();

// The ranks of the job on this rank's host (the same host name), this one included: a collective
// (every rank calls it). CPU ranks that share a host share its memory.
int ranks_on_this_host(Communicator& comm);

// Argument checks shared by the backends (throw naming the collective and the tensors).
void check_collective(const char* what, const Tensor& t);
void check_sharded(const char* what, const Tensor& whole, const Tensor& part, int world_size);

// The backends (dist/mpi_communicator.cpp, dist/nccl_communicator.cpp); nullptr-free: they throw
// when the build lacks them.
std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options);
std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options);

}  // namespace attnlab
