// Launch detection: which launcher started this process and where it sits in the job, read from
// the environment the launchers set (docs/distributed.md):
//   OpenMPI mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   PMI (the Hydra mpiexec of MPICH, Intel MPI, MVAPICH): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm srun:     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// checked in this order: OpenMPI, torchrun-style, PMI, Slurm (an sbatch script inherits SLURM_*
// from its allocation, and mpirun / mpiexec / torchrun under Slurm set their own variables too:
// those describe the process). None of them: one process. The device of a rank is its local rank
// (one process per GPU). PMI and Slurm launches rendezvous over TCP (MASTER_ADDR, MASTER_PORT) or
// a file: this build's MPI is OpenMPI's, which a Hydra launch cannot join.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace attnlab {

enum class Launcher : uint8_t { none, mpirun, srun, env, pmi };
const char* launcher_name(Launcher l);  // "none", "mpirun", "srun", "env", "pmi"

struct LaunchInfo {
  Launcher launcher = Launcher::none;
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  // torchrun-style (and srun when set): the TCP rendezvous
  int master_port = 0;
  bool under_mpi() const { return launcher == Launcher::mpirun; }
};

using EnvLookup = std::function<const char*(const char*)>;  // nullptr when unset

// Throws naming the variable when a value is not a number in range, or when rank is not below
// the world size.
LaunchInfo detect_launch(const EnvLookup& env);
LaunchInfo detect_launch();  // from the process environment

// The environment variable the launcher set the local rank from ("" for none).
const char* local_rank_variable(Launcher l);
// For an error whose cause may be Slurm's variables read as a launch (srun): a sentence saying
// that SLURM_NTASKS is the allocation's, so a single process run inside an sbatch script reads as
// one rank of many, and what to do; "" for other launchers.
const char* srun_allocation_hint(Launcher l);
// One process per GPU: the CUDA device this rank runs on. Its local rank where that is below
// n_devices (the devices this process sees); device 0 where the process sees one device that
// CUDA_VISIBLE_DEVICES chose (a launcher giving each rank its own GPU: srun --gpus-per-task=1);
// else throws, naming the rank, its local rank and where it came from, the device count and
// CUDA_VISIBLE_DEVICES (as `env` gives it).
int local_device(const LaunchInfo& launch, int n_devices, const EnvLookup& env);

}  // namespace attnlab
