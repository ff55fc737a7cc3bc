#include "dist/launch.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace attnlab {
namespace {

int parse_int(const EnvLookup& env, const char* name, int lo, int hi) {
  const char* v = env(name);
  ATTN_REQUIRE(v && *v, "environment variable %s is not set (the launcher sets it)", name);
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  ATTN_REQUIRE(errno == 0 && end != v && *end == '\0' && x >= lo && x <= hi,
               "environment variable %s='%s': expected an integer in [%d, %d]", name, v, lo, hi);
  return int(x);
}

LaunchInfo read(const EnvLookup& env, Launcher l, const char* rank, const char* size,
                const char* local) {
  LaunchInfo info;
  info.launcher = l;
  info.world_size = parse_int(env, size, 1, 1 << 20);
  info.rank = parse_int(env, rank, 0, 1 << 20);
  ATTN_REQUIRE(info.rank < info.world_size, "%s=%d is not below %s=%d", rank, info.rank, size,
               info.world_size);
  // The local rank's variable is optional (a torchrun-style or PMI launch on one node: then it is
  // the rank; past the node's devices, local_device says so).
  info.local_rank = env(local) ? parse_int(env, local, 0, 1 << 20) : info.rank;
  if (const char* a = env("MASTER_ADDR"); a && *a) info.master_addr = a;
  if (env("MASTER_PORT")) info.master_port = parse_int(env, "MASTER_PORT", 1, 65535);
  return info;
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::none:
      return "none";
    case Launcher::mpirun:
      return "mpirun";
    case Launcher::srun:
      return "srun";
    case Launcher::env:
      return "env";
    case Launcher::pmi:
      return "pmi";
  }
  return "?";
}

LaunchInfo detect_launch(const EnvLookup& env) {
  if (env("OMPI_COMM_WORLD_SIZE")) {
    const LaunchInfo info = read(env, Launcher::mpirun, "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
    // A launcher started by mpirun (`mpirun -np <nodes> torchrun ...`) hands mpirun's variables
    // down to its processes, which they do not name: every process read the same mpirun rank
    // and trained on its own into the same out_dir. Torchrun-style variables that disagree
    // are refused, naming both.
    if (env("WORLD_SIZE") && env("RANK")) {
      const LaunchInfo t = read(env, Launcher::env, "RANK", "WORLD_SIZE", "LOCAL_RANK");
      ATTN_REQUIRE(t.rank == info.rank && t.world_size == info.world_size,
                   "this process has mpirun's OMPI_COMM_WORLD_RANK=%d and "
                   "OMPI_COMM_WORLD_SIZE=%d and torchrun-style RANK=%d and WORLD_SIZE=%d, which "
                   "disagree (a launcher started by mpirun passes mpirun's variables on to its "
                   "processes); start the ranks with one launcher: mpirun -np N attnlab train "
                   "..., or torchrun-style without mpirun",
                   info.rank, info.world_size, t.rank, t.world_size);
    }
    return info;
  }
  // torchrun-style variables before Slurm's: they are set for this process by whoever started
  // it, while SLURM_* are inherited from the allocation (an sbatch script has SLURM_PROCID 0 and
  // SLURM_NTASKS; `srun torchrun` one SLURM_PROCID per node), which made every process of a
  // torchrun-style launch inside Slurm a rank 0 of its own.
  if (env("WORLD_SIZE") || env("RANK")) {
    LaunchInfo info = read(env, Launcher::env, "RANK", "WORLD_SIZE", "LOCAL_RANK");
    ATTN_REQUIRE(info.world_size == 1 || (!info.master_addr.empty() && info.master_port > 0),
                 "WORLD_SIZE=%d but MASTER_ADDR and MASTER_PORT are not both set (the rendezvous "
                 "of a torchrun-style launch needs them)",
                 info.world_size);
    // A launcher started by the Hydra mpiexec (PMI_SIZE, with its MPI_LOCALRANKID) or inside an
    // srun step (SLURM_STEP_NUM_TASKS) starts one or more ranks per task (`mpiexec -n <nodes>
    // torchrun --nnodes ...`, `srun torchrun`), so the world holds at least the tasks; fewer
    // means each task started a world of its own (`srun -n 2 torchrun --standalone ...`), and
    // they trained side by side into the same out_dir.
    const auto at_least_tasks = [&](const char* var, const char* starter) {
      const char* tasks = env(var);
      if (!tasks) return;
      const long n = std::strtol(tasks, nullptr, 10);
      ATTN_REQUIRE(n <= info.world_size,
                   "WORLD_SIZE=%d is smaller than %s's %s=%ld: each task started a world of its "
                   "own (a torchrun --standalone per task?); give the launcher the whole job's "
                   "size (torchrun --nnodes, a shared rendezvous) or let %s start the ranks",
                   info.world_size, starter, var, n, starter);
    };
    if (env("MPI_LOCALRANKID")) at_least_tasks("PMI_SIZE", "mpiexec");
    at_least_tasks("SLURM_STEP_NUM_TASKS", "srun");
    return info;
  }
  // The Hydra mpiexec (MPICH, Intel MPI, MVAPICH) before Slurm's, for the same reason: under an
  // allocation its PMI_* name this process. Without them such a launch started N independent
  // single-process runs into the same out_dir.
  // `srun --mpi=pmi2` sets PMI_RANK / PMI_SIZE beside its own SLURM_* (the same values, and no
  // MPI_LOCALRANKID): that is an srun launch, whose SLURM_LOCALID gives the local rank.
  auto same = [&](const char* a, const char* b) {
    return env(a) && env(b) && std::string(env(a)) == env(b);
  };
  const bool srun_pmi = !env("MPI_LOCALRANKID") && same("PMI_RANK", "SLURM_PROCID") &&
                        same("PMI_SIZE", "SLURM_NTASKS");
  if ((env("PMI_SIZE") || env("PMI_RANK")) && !srun_pmi)
    return read(env, Launcher::pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID");
  if (env("SLURM_PROCID") && (env("SLURM_NTASKS") || env("SLURM_STEP_NUM_TASKS")))
    return read(env, Launcher::srun, "SLURM_PROCID",
                env("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID");
  // A task of a step without a task count: read as one process, it would train on its own.
  ATTN_REQUIRE(!env("SLURM_PROCID") || std::string(env("SLURM_PROCID")) == "0",
               "SLURM_PROCID=%s but neither SLURM_NTASKS nor SLURM_STEP_NUM_TASKS is set: the "
               "number of ranks is unknown (srun sets them; set SLURM_NTASKS, or unset "
               "SLURM_PROCID for a single process)",
               env("SLURM_PROCID"));
  return LaunchInfo{};
}

const char* local_rank_variable(Launcher l) {
  switch (l) {
    case Launcher::mpirun:
      return "OMPI_COMM_WORLD_LOCAL_RANK";
    case Launcher::srun:
      return "SLURM_LOCALID";
    case Launcher::env:
      return "LOCAL_RANK";
    case Launcher::pmi:
      return "MPI_LOCALRANKID";
    case Launcher::none:
      break;
  }
  return "";
}

const char* srun_allocation_hint(Launcher l) {
  return l == Launcher::srun
             ? " (SLURM_NTASKS is the allocation's: a single process inside an sbatch script is "
               "read as rank SLURM_PROCID of SLURM_NTASKS; start the ranks with srun, or run the "
               "one process with SLURM_NTASKS unset)"
             : "";
}

int local_device(const LaunchInfo& l, int n_devices, const EnvLookup& env) {
  if (l.local_rank < n_devices) return l.local_rank;
  const char* visible = env("CUDA_VISIBLE_DEVICES");
  // The launcher made one GPU visible to this rank (two ranks given the same one fail in NCCL's
  // init: a duplicate GPU).
  if (n_devices == 1 && visible && *visible) return 0;
  const char* var = local_rank_variable(l.launcher);
  const std::string from =
      env(var) ? strformat(" (%s)", var) : strformat(" (the rank: %s unset)", var);
  ATTN_FAIL(
      "rank %d of %d (%s) has local rank %d%s, but this process sees %d CUDA device%s%s: one "
      "process per GPU, so start at most %d rank%s per node, or give each rank its own device",
      l.rank, l.world_size, launcher_name(l.launcher), l.local_rank, from.c_str(), n_devices,
      n_devices == 1 ? "" : "s",
      visible ? strformat(" (CUDA_VISIBLE_DEVICES='%s')", visible).c_str() : "", n_devices,
      n_devices == 1 ? "" : "s");
}

LaunchInfo detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace attnlab
