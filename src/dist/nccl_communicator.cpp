// The `nccl` backend: CUDA tensors over NCCL, one process per GPU. Collectives run on the
// communicator's own non-blocking stream (so the legacy default stream's copies do not wait for
// them), each ordered after the compute stream's work by an event; wait() orders the compute
// stream after them. The unique id travels by MPI under mpirun, else by TCP at
// MASTER_ADDR:MASTER_PORT, else by distributed.rendezvous_file (dist/rendezvous.h).
//
// Watchdog: a thread polls ncclCommGetAsyncError and the oldest unfinished collective (an event
// recorded after each) every 50 ms; an NCCL error, or a collective (or the initialisation) older
// than timeout_s, prints "rank R of W: ..." and aborts the communicator and the process, so the
// job ends instead of hanging (the launcher then ends the other ranks, or their own watchdogs do).
#include "dist/communicator.h"

#if ATTNLAB_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "dist/rendezvous.h"
#endif

namespace attnlab {

#if ATTNLAB_HAVE_NCCL
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(const char* what, DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    default:
      break;
  }
  ATTN_FAIL("%s: the nccl backend reduces f32, bf16 and i32 tensors, got %s", what, dtype_name(t));
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const CommOptions& o)
      : rank_(o.launch.rank),
        world_(o.launch.world_size),
        timeout_s_(o.timeout_s),
        compute_(reinterpret_cast<cudaStream_t>(o.compute_stream)) {
    ATTN_REQUIRE(compute_ != nullptr, "nccl communicator: no compute stream given");
    CUDA_CHECK(cudaGetDevice(&device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&host_scratch_dev_, kHostScratchBytes));
    ncclUniqueId id{};
    if (rank_ == 0) nccl("ncclGetUniqueId", ncclGetUniqueId(&id));
    const std::string mine(reinterpret_cast<const char*>(&id), sizeof(id));
    const std::string got = exchange_id(o, mine);
    ATTN_REQUIRE(got.size() == sizeof(id), "nccl rendezvous: got %zu bytes, expected %zu",
                 got.size(), sizeof(id));
    std::copy(got.begin(), got.end(), reinterpret_cast<char*>(&id));
    watchdog_ = std::thread([this] { watch(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      init_started_ = Clock::now();
      initializing_ = true;
    }
    const ncclResult_t init = ncclCommInitRank(&comm_, world_, id, rank_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      initializing_ = false;
      stop_ = init != ncclSuccess;  // a failed start: no destructor runs to end the watchdog
    }
    if (init != ncclSuccess) {
      cv_.notify_all();
      watchdog_.join();
      nccl("ncclCommInitRank", init);
    }
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : timing_events_) cudaEventDestroy(e);
    for (auto& p : pending_) cudaEventDestroy(p.done);
    cudaEventDestroy(compute_done_);
    cudaEventDestroy(comm_done_);
    cudaFree(host_scratch_dev_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_cuda("all_reduce", t);
    begin();
    nccl("ncclAllReduce", ncclAllReduce(t.data, t.data, size_t(t.numel()),
                                        nccl_type("all_reduce", t.dtype), red(op), comm_, stream_));
    end("all_reduce", t.numel());
  }
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    check_sharded("reduce_scatter", send, recv, world_);
    check_cuda("reduce_scatter", send);
    begin();
    nccl("ncclReduceScatter",
         ncclReduceScatter(send.data, recv.data, size_t(recv.numel()),
                           nccl_type("reduce_scatter", send.dtype), red(op), comm_, stream_));
    end("reduce_scatter", send.numel());
  }
  void all_gather(const Tensor& send, const Tensor& recv) override {
    check_sharded("all_gather", recv, send, world_);
    check_cuda("all_gather", send);
    begin();
    nccl("ncclAllGather", ncclAllGather(send.data, recv.data, size_t(send.numel()),
                                        nccl_type("all_gather", send.dtype), comm_, stream_));
    end("all_gather", recv.numel());
  }
  void broadcast(const Tensor& t, int root) override {
    check_root(root);
    check_cuda("broadcast", t);
    begin();
    nccl("ncclBroadcast",
         ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream_));
    end("broadcast", t.numel());
  }
  void barrier(double timeout_s = 0) override {
    begin();
    nccl("ncclAllReduce", ncclAllReduce(host_scratch_dev_, host_scratch_dev_, 1, ncclFloat64,
                                        ncclSum, comm_, stream_));
    end("barrier", 0, timeout_s);
    sync_comm_stream();
  }
  void wait() override {
    CUDA_CHECK(cudaEventRecord(comm_done_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_, 0));
  }
  void all_reduce_host(double* values, int n) override {
    ATTN_REQUIRE(size_t(n) * sizeof(double) <= kHostScratchBytes,
                 "all_reduce_host: %d values exceed the scratch", n);
    begin();
    CUDA_CHECK(cudaMemcpyAsync(host_scratch_dev_, values, size_t(n) * sizeof(double),
                               cudaMemcpyHostToDevice, stream_));
    nccl("ncclAllReduce", ncclAllReduce(host_scratch_dev_, host_scratch_dev_, size_t(n),
                                        ncclFloat64, ncclSum, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(values, host_scratch_dev_, size_t(n) * sizeof(double),
                               cudaMemcpyDeviceToHost, stream_));
    end("all_reduce (host values)", n);
    sync_comm_stream();
  }
  void broadcast_host(void* data, size_t bytes, int root) override {
    check_root(root);
    for (size_t at = 0; at < bytes; at += kHostScratchBytes) {
      const size_t n = std::min(kHostScratchBytes, bytes - at);
      char* p = static_cast<char*>(data) + at;
      begin();
      CUDA_CHECK(cudaMemcpyAsync(host_scratch_dev_, p, n, cudaMemcpyHostToDevice, stream_));
      nccl("ncclBroadcast",
           ncclBroadcast(host_scratch_dev_, host_scratch_dev_, n, ncclUint8, root, comm_, stream_));
      CUDA_CHECK(cudaMemcpyAsync(p, host_scratch_dev_, n, cudaMemcpyDeviceToHost, stream_));
      end("broadcast (host bytes)", int64_t(n));
      sync_comm_stream();
    }
  }
  [[noreturn]] void abort(const std::string& message) override { die(message); }

  // Timeline by CUDA events (timing ones, from a pool reused step after step): the origin and the
  // marks on the compute stream, each collective's start (after the stream waited for the compute
  // stream) and end on the communication stream.
  void begin_timeline() override {
    Communicator::begin_timeline();
    used_timing_ = 0;
    marks_.clear();
    spans_.clear();
    origin_ = timing_event();
    CUDA_CHECK(cudaEventRecord(origin_, compute_));
  }
  void mark_timeline() override {
    if (!timeline_on_) return;
    marks_.push_back(timing_event());
    CUDA_CHECK(cudaEventRecord(marks_.back(), compute_));
  }
  CommTimeline read_timeline() override {
    Communicator::read_timeline();
    CommTimeline t;
    t.blocking = false;
    auto ms = [&](cudaEvent_t e) {
      CUDA_CHECK(cudaEventSynchronize(e));
      float v = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&v, origin_, e));
      return double(v);
    };
    for (const auto& [a, b] : spans_) t.collectives.push_back(CommTimeline::Span{ms(a), ms(b)});
    for (cudaEvent_t e : marks_) t.marks_ms.push_back(ms(e));
    return t;
  }

 private:
  static constexpr size_t kHostScratchBytes = size_t(1) << 16;
  struct Pending {
    cudaEvent_t done;
    Clock::time_point issued;
    const char* what;
    int64_t seq, numel;
    double timeout_s;  // its bound (distributed.timeout_s, or a barrier's own)
  };

  std::string exchange_id(const CommOptions& o, const std::string& id) {
    if (world_ == 1) return id;
    if (o.launch.under_mpi()) {
#if ATTNLAB_HAVE_MPI
      CommOptions mo = o;
      mo.backend = "mpi";
      std::string buf = id;
      make_mpi_communicator(mo)->broadcast_host(buf.data(), buf.size(), 0);
      return buf;
#endif
    }
    if (!o.launch.master_addr.empty() && o.launch.master_port > 0)
      return tcp_rendezvous(id, rank_, world_, o.launch.master_addr, o.launch.master_port,
                            timeout_s_);
    ATTN_REQUIRE(!o.rendezvous_file.empty(),
                 "nccl with %d ranks needs a rendezvous for its unique id: launch with OpenMPI's "
                 "mpirun (this build %s MPI), set MASTER_ADDR and MASTER_PORT, or set "
                 "distributed.rendezvous_file to a path every rank shares%s",
                 world_,
#if ATTNLAB_HAVE_MPI
                 "has",
#else
                 "lacks",
#endif
                 srun_allocation_hint(o.launch.launcher));
    return file_rendezvous(id, rank_, o.rendezvous_file, timeout_s_);
  }

  static ncclRedOp_t red(ReduceOp op) { return op == ReduceOp::avg ? ncclAvg : ncclSum; }
  void nccl(const char* call, ncclResult_t r) {
    if (r == ncclSuccess) return;
    const std::string last = ncclGetLastError(comm_);
    // Two ranks on one GPU (srun --gres=gpu:1 with two tasks, or CUDA_VISIBLE_DEVICES giving each
    // rank the same device) fail here in NCCL's init.
    const char* hint = last.find("Duplicate GPU") != std::string::npos
                           ? ": two ranks were given the same GPU; one process per GPU, so give "
                             "each rank its own device (srun --gpus-per-task=1, or one "
                             "CUDA_VISIBLE_DEVICES entry per rank)"
                           : "";
    ATTN_FAIL("rank %d of %d (device %d): %s failed: %s (%s)%s", rank_, world_, device_, call,
              ncclGetErrorString(r), last.c_str(), hint);
  }
  void check_cuda(const char* what, const Tensor& t) const {
    check_collective(what, t);
    ATTN_REQUIRE(t.device == Device::cuda, "%s: the nccl backend takes CUDA tensors, got %s", what,
                 t.str().c_str());
  }
  void check_root(int root) const {
    ATTN_REQUIRE(root >= 0 && root < world_, "broadcast: root rank %d out of range (world size %d)",
                 root, world_);
  }
  // The collective's stream waits for the compute stream's work so far.
  void begin() {
    CUDA_CHECK(cudaEventRecord(compute_done_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_done_, 0));
    if (timeline_on_) {
      spans_.emplace_back(timing_event(), nullptr);
      CUDA_CHECK(cudaEventRecord(spans_.back().first, stream_));
    }
  }
  cudaEvent_t timing_event() {
    if (used_timing_ == timing_events_.size()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      timing_events_.push_back(e);
    }
    return timing_events_[used_timing_++];
  }
  // Hands the collective to the watchdog: an event after it, and when it was issued.
  void end(const char* what, int64_t numel, double timeout_s = 0) {
    if (timeline_on_ && !spans_.empty() && spans_.back().second == nullptr) {
      spans_.back().second = timing_event();
      CUDA_CHECK(cudaEventRecord(spans_.back().second, stream_));
    }
    std::lock_guard<std::mutex> lock(mu_);
    cudaEvent_t e;
    if (free_events_.empty()) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = free_events_.back();
      free_events_.pop_back();
    }
    CUDA_CHECK(cudaEventRecord(e, stream_));
    pending_.push_back(
        Pending{e, Clock::now(), what, ++seq_, numel, timeout_s > 0 ? timeout_s : timeout_s_});
  }
  // Blocks the host until the communication stream is idle (host-value collectives).
  void sync_comm_stream() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void watch() {
    cudaSetDevice(device_);  // event queries from this thread; a failure shows in them
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (stop_) break;
      const auto now = Clock::now();
      if (initializing_) {
        if (std::chrono::duration<double>(now - init_started_).count() > timeout_s_)
          die(strformat("ncclCommInitRank did not complete within distributed.timeout_s = %g s: "
                        "another rank did not start, died or cannot reach this one",
                        timeout_s_),
              false);
        continue;
      }
      ncclResult_t async = ncclSuccess;
      if (comm_ && ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress)
        die(strformat("NCCL reported an asynchronous error: %s (%s)", ncclGetErrorString(async),
                      ncclGetLastError(comm_)));
      while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
        free_events_.push_back(pending_.front().done);
        pending_.pop_front();
      }
      if (!pending_.empty()) {
        const Pending& p = pending_.front();
        if (std::chrono::duration<double>(now - p.issued).count() > p.timeout_s)
          die(
              strformat("NCCL %s #%lld (%lld elements) did not complete within %s%g s: "
                        "another rank died, hung or called a different collective",
                        p.what, (long long)p.seq, (long long)p.numel,
                        p.timeout_s == timeout_s_ ? "distributed.timeout_s = " : "", p.timeout_s));
      }
    }
  }
  [[noreturn]] void die(const std::string& message, bool abort_comm = true) {
    const std::string who = message.rfind("rank ", 0) == 0
                                ? ""
                                : strformat("rank %d of %d (device %d): ", rank_, world_, device_);
    std::fprintf(stderr, "attnlab: %s%s; ending the job\n", who.c_str(), message.c_str());
    std::fflush(stderr);
    if (abort_comm && comm_) ncclCommAbort(comm_);  // not during ncclCommInitRank
    std::_Exit(1);
  }

  int rank_, world_, device_ = 0;
  double timeout_s_;
  cudaStream_t compute_, stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, comm_done_ = nullptr;
  void* host_scratch_dev_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread watchdog_;
  bool stop_ = false, initializing_ = false;
  Clock::time_point init_started_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  int64_t seq_ = 0;
  // The timeline's events (main thread only).
  std::vector<cudaEvent_t> timing_events_;
  size_t used_timing_ = 0;
  cudaEvent_t origin_ = nullptr;
  std::vector<cudaEvent_t> marks_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> spans_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

#else

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions&) {
  ATTN_FAIL(
      "distributed.backend 'nccl': this build has no NCCL (CMake found no nccl.h and "
      "libnccl); available: %s",
      available_backends().c_str());
}

#endif

}  // namespace attnlab
