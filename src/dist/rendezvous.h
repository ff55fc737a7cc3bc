// Rendezvous without MPI: rank 0 hands a small blob (the NCCL unique id) to every other rank.
// - TCP: rank 0 listens on `port` (all interfaces); the others connect to addr:port, retrying
//   until rank 0 listens, send their rank and receive the blob. Rank 0 returns once every rank
//   1..world-1 has connected once (a duplicate or out-of-range rank is an error).
// - File: rank 0 writes the blob to `path` atomically (temporary file + rename); the others poll
//   for it. The path must be new for each job (e.g. name it after $SLURM_JOB_ID): a file left by
//   an earlier job would be read as this job's.
// Both throw naming the address or path and the rank when nothing arrives within timeout_s.
#pragma once
#include <string>

namespace attnlab {

std::string tcp_rendezvous(const std::string& blob, int rank, int world_size,
                           const std::string& addr, int port, double timeout_s);
std::string file_rendezvous(const std::string& blob, int rank, const std::string& path,
                            double timeout_s);

}  // namespace attnlab
