// The `mpi` backend: CPU tensors over MPI (OpenMPI in CI). Each collective is the non-blocking
// MPI call followed by a wait that polls MPI_Test until distributed.timeout_s, so a rank that
// died or hung turns into an error on the others instead of a hang (MPI has no timeout of its
// own). MPI is initialised once per process (the first communicator) and finalised at exit;
// each communicator works on its own duplicate of MPI_COMM_WORLD.
#include "dist/communicator.h"

#if ATTNLAB_HAVE_MPI
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#endif

namespace attnlab {

#if ATTNLAB_HAVE_MPI
namespace {

using Clock = std::chrono::steady_clock;

// MPI_Init_thread once, MPI_Finalize at normal process exit.
void ensure_mpi_initialized() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return;
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  ATTN_REQUIRE(rc == MPI_SUCCESS, "MPI_Init_thread failed (code %d)", rc);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

MPI_Datatype mpi_type(const char* what, DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT;
    default:
      break;
  }
  ATTN_FAIL("%s: the mpi backend reduces f32 and i32 tensors, got %s (the CPU path is fp32)", what,
            dtype_name(t));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& o) : timeout_s_(o.timeout_s) {
    ensure_mpi_initialized();
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    ATTN_REQUIRE(o.launch.rank == rank_ && o.launch.world_size == world_,
                 "the launcher (%s) says rank %d of %d but MPI says rank %d of %d (the mpi "
                 "backend needs the ranks mpirun started)%s",
                 launcher_name(o.launch.launcher), o.launch.rank, o.launch.world_size, rank_,
                 world_, srun_allocation_hint(o.launch.launcher));
  }
  // A collective that timed out is still pending: it is given up to timeout_s more to complete
  // (a late rank may still join it) before the communicator is freed; if it does not, the
  // communicator is left allocated (freeing it under a pending call crashes MPI's progress).
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    for (MPI_Request& r : abandoned_) {
      int done = 0;
      while (!done && Clock::now() < deadline) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (!done) return;
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend() const override { return "mpi"; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_cpu("all_reduce", t);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, t.data, int(t.numel()), mpi_type("all_reduce", t.dtype), MPI_SUM,
                   comm_, &req);
    finish(req, "all_reduce", t.numel());
    if (op == ReduceOp::avg) scale(t);
  }
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    check_sharded("reduce_scatter", send, recv, world_);
    check_cpu("reduce_scatter", send);
    const auto* own = static_cast<const char*>(send.data) + size_t(rank_) * recv.nbytes();
    // In place (recv is this rank's slice of send): MPI wants MPI_IN_PLACE for that, which reads
    // the whole send buffer from recvbuf; reduce into a scratch copy instead.
    std::vector<char> scratch;
    void* out = recv.data;
    if (own == recv.data) {
      scratch.resize(recv.nbytes());
      out = scratch.data();
    }
    MPI_Request req;
    MPI_Ireduce_scatter_block(send.data, out, int(recv.numel()),
                              mpi_type("reduce_scatter", send.dtype), MPI_SUM, comm_, &req);
    finish(req, "reduce_scatter", send.numel());
    if (out != recv.data) std::copy(scratch.begin(), scratch.end(), static_cast<char*>(recv.data));
    if (op == ReduceOp::avg) scale(recv);
  }
  void all_gather(const Tensor& send, const Tensor& recv) override {
    check_sharded("all_gather", recv, send, world_);
    check_cpu("all_gather", send);
    const auto* own = static_cast<const char*>(recv.data) + size_t(rank_) * send.nbytes();
    MPI_Request req;
    const MPI_Datatype ty = mpi_type("all_gather", send.dtype);
    MPI_Iallgather(own == send.data ? MPI_IN_PLACE : send.data, int(send.numel()), ty, recv.data,
                   int(send.numel()), ty, comm_, &req);
    finish(req, "all_gather", recv.numel());
  }
  void broadcast(const Tensor& t, int root) override {
    check_root(root);
    check_cpu("broadcast", t);
    MPI_Request req;
    MPI_Ibcast(t.data, int(t.nbytes()), MPI_BYTE, root, comm_, &req);
    finish(req, "broadcast", t.numel());
  }
  void barrier(double timeout_s = 0) override {
    MPI_Request req;
    MPI_Ibarrier(comm_, &req);
    finish(req, "barrier", 0, timeout_s);
  }
  void all_reduce_host(double* values, int n) override {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, comm_, &req);
    finish(req, "all_reduce (host values)", n);
  }
  void broadcast_host(void* data, size_t bytes, int root) override {
    check_root(root);
    ATTN_REQUIRE(bytes < (size_t(1) << 31), "mpi broadcast of %zu host bytes: at most 2^31 - 1",
                 bytes);
    MPI_Request req;
    MPI_Ibcast(data, int(bytes), MPI_BYTE, root, comm_, &req);
    finish(req, "broadcast (host bytes)", int64_t(bytes));
  }
  [[noreturn]] void abort(const std::string& message) override {
    const std::string who =
        message.rfind("rank ", 0) == 0 ? "" : strformat("rank %d of %d: ", rank_, world_);
    std::fprintf(stderr, "attnlab: %s%s; ending the job\n", who.c_str(), message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  void check_cpu(const char* what, const Tensor& t) const {
    check_collective(what, t);
    ATTN_REQUIRE(t.device == Device::cpu, "%s: the mpi backend takes CPU tensors, got %s", what,
                 t.str().c_str());
    ATTN_REQUIRE(t.nbytes() < (size_t(1) << 31), "%s: %s is over MPI's 2^31 count limit", what,
                 t.str().c_str());
  }
  void check_root(int root) const {
    ATTN_REQUIRE(root >= 0 && root < world_, "broadcast: root rank %d out of range (world size %d)",
                 root, world_);
  }
  void scale(const Tensor& t) const {
    ATTN_REQUIRE(t.dtype == DType::f32, "all_reduce avg: f32 only, got %s", t.str().c_str());
    float* p = t.ptr<float>();
    const float s = 1.f / float(world_);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= s;
  }
  // Polls the request until it completes or timeout_s passes (then throws: the request stays
  // pending, so the job must end; the trainer aborts it).
  void finish(MPI_Request& req, const char* what, int64_t numel, double timeout_s = 0) {
    ++seq_;
    timeline_collective_start();
    const auto t0 = Clock::now();
    const double limit = timeout_s > 0 ? timeout_s : timeout_s_;
    const auto deadline = t0 + std::chrono::duration<double>(limit);
    int done = 0;
    for (int spins = 0;; ++spins) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) {
        timeline_collective_end();
        return;
      }
      if (spins > 1000) {
        if (Clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 20));
      }
    }
    abandoned_.push_back(req);
    ATTN_FAIL(
        "rank %d of %d: MPI %s #%lld (%lld elements) did not complete within %s%g s: another "
        "rank died, hung or called a different collective (every waiting rank reports this; "
        "the rank that does not is the one to look at)",
        rank_, world_, what, (long long)seq_, (long long)numel,
        timeout_s > 0 ? "" : "distributed.timeout_s = ", limit);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  double timeout_s_;
  int64_t seq_ = 0;
  std::vector<MPI_Request> abandoned_;  // timed-out collectives, still pending
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(options);
}

#else

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions&) {
  ATTN_FAIL(
      "distributed.backend 'mpi': this build has no MPI (CMake found none; install "
      "libopenmpi-dev, see scripts/setup.sh, and reconfigure); available: %s",
      available_backends().c_str());
}

#endif

}  // namespace attnlab
