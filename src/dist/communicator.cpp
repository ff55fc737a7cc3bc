#include "dist/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

void check_collective(const char* what, const Tensor& t) {
  ATTN_REQUIRE(!t.empty() || t.numel() == 0, "%s: tensor %s has no data", what, t.str().c_str());
}

void check_sharded(const char* what, const Tensor& whole, const Tensor& part, int world_size) {
  check_collective(what, whole);
  check_collective(what, part);
  ATTN_REQUIRE(whole.dtype == part.dtype && whole.device == part.device &&
                   whole.numel() == part.numel() * world_size,
               "%s: %s must hold world size (%d) x %s", what, whole.str().c_str(), world_size,
               part.str().c_str());
}

namespace {
double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

void Communicator::begin_timeline() {
  timeline_ = CommTimeline{};
  timeline_origin_ = std::chrono::steady_clock::now();
  timeline_on_ = true;
}

void Communicator::mark_timeline() {
  if (timeline_on_)
    timeline_.marks_ms.push_back(ms_between(timeline_origin_, std::chrono::steady_clock::now()));
}

CommTimeline Communicator::read_timeline() {
  timeline_on_ = false;
  return std::move(timeline_);
}

void Communicator::timeline_collective_start() {
  if (timeline_on_) collective_start_ = std::chrono::steady_clock::now();
}

void Communicator::timeline_collective_end() {
  if (!timeline_on_) return;
  const auto now = std::chrono::steady_clock::now();
  timeline_.collectives.push_back(CommTimeline::Span{
      ms_between(timeline_origin_, collective_start_), ms_between(timeline_origin_, now)});
}

void LocalCommunicator::all_reduce(const Tensor& t, ReduceOp) { check_collective("all_reduce", t); }

void LocalCommunicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp) {
  check_sharded("reduce_scatter", send, recv, 1);
  if (send.data != recv.data) copy_tensor(recv, send);
}

void LocalCommunicator::all_gather(const Tensor& send, const Tensor& recv) {
  check_sharded("all_gather", recv, send, 1);
  if (send.data != recv.data) copy_tensor(recv, send);
}

void LocalCommunicator::broadcast(const Tensor& t, int root) {
  ATTN_REQUIRE(root == 0, "broadcast: root rank %d out of range (world size 1)", root);
  check_collective("broadcast", t);
}

void LocalCommunicator::broadcast_host(void*, size_t, int root) {
  ATTN_REQUIRE(root == 0, "broadcast: root rank %d out of range (world size 1)", root);
}

void LocalCommunicator::abort(const std::string& message) {
  std::fprintf(stderr, "attnlab: rank 0 of 1: %s\n", message.c_str());
  std::exit(1);
}

std::string available_backends() {
  std::string s = "none";
#if ATTNLAB_HAVE_MPI
  s += ", mpi";
#endif
#if ATTNLAB_HAVE_NCCL
  s += ", nccl";
#endif
  return s;
}

std::unique_ptr<Communicator> make_communicator(const CommOptions& options) {
  const std::string& b = options.backend;
  if (b == "none") {
    ATTN_REQUIRE(options.launch.world_size == 1,
                 "distributed.backend is 'none' but the launcher (%s) started %d ranks; use "
                 "backend auto, mpi or nccl%s",
                 launcher_name(options.launch.launcher), options.launch.world_size,
                 srun_allocation_hint(options.launch.launcher));
    return std::make_unique<LocalCommunicator>();
  }
  if (b == "mpi") {
    ATTN_REQUIRE(options.launch.launcher != Launcher::pmi,
                 "distributed.backend 'mpi' under a PMI launch (PMI_RANK / PMI_SIZE: the Hydra "
                 "mpiexec of MPICH, Intel MPI or MVAPICH): this build's MPI is OpenMPI's, which "
                 "cannot join those ranks; launch with OpenMPI's mpirun, or on CUDA use backend "
                 "nccl (or auto) with MASTER_ADDR and MASTER_PORT or distributed.rendezvous_file");
    return make_mpi_communicator(options);
  }
  if (b == "nccl") return make_nccl_communicator(options);
  ATTN_FAIL("unknown distributed backend '%s' (valid: none, mpi, nccl; this build has %s)",
            b.c_str(), available_backends().c_str());
}

int ranks_on_this_host(Communicator& comm) {
  if (comm.world_size() == 1) return 1;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  // One slot per rank, its host name's hash (52 bits: exact in a double; + 1: never 0), summed.
  const uint64_t h = std::hash<std::string>{}(name) & ((uint64_t(1) << 52) - 1);
  std::vector<double> hosts(size_t(comm.world_size()), 0.0);
  hosts[size_t(comm.rank())] = double(h + 1);
  comm.all_reduce_host(hosts.data(), int(hosts.size()));
  return int(std::count(hosts.begin(), hosts.end(), hosts[size_t(comm.rank())]));
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
  CommOptions o;
  o.backend = backend;
  o.launch = detect_launch();
  return make_communicator(o);
}

}  // namespace attnlab
