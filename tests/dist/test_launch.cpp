// Launch detection from the launchers' environment variables, and the TCP and file rendezvous
// (rank 0 and the other ranks as threads of this process on localhost).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dist/launch.h"
#include "dist/rendezvous.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

EnvLookup env_of(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

TEST(Launch, NoLauncherIsOneProcess) {
  const LaunchInfo l = detect_launch(env_of({}));
  EXPECT_EQ(l.launcher, Launcher::none);
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.local_rank, 0);
}

TEST(Launch, EachLauncher) {
  LaunchInfo l = detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "5"},
                                       {"OMPI_COMM_WORLD_SIZE", "8"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(l.launcher, Launcher::mpirun);  // mpirun inside a Slurm allocation: MPI wins
  EXPECT_TRUE(l.under_mpi());
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.local_rank, 1);

  l = detect_launch(env_of({{"SLURM_PROCID", "3"},
                            {"SLURM_NTASKS", "4"},
                            {"SLURM_LOCALID", "3"},
                            {"MASTER_ADDR", "node7"},
                            {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(l.launcher, Launcher::srun);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 3);
  EXPECT_EQ(l.master_addr, "node7");
  EXPECT_EQ(l.master_port, 29500);

  l = detect_launch(env_of({{"RANK", "2"},
                            {"WORLD_SIZE", "16"},
                            {"LOCAL_RANK", "2"},
                            {"MASTER_ADDR", "10.0.0.1"},
                            {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(l.launcher, Launcher::env);
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.world_size, 16);
  EXPECT_EQ(l.local_rank, 2);
  EXPECT_STREQ(launcher_name(l.launcher), "env");

  // LOCAL_RANK may be left out (one node): it is the rank.
  l = detect_launch(
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}}));
  EXPECT_EQ(l.local_rank, 1);

  // torchrun-style variables inside a Slurm allocation (an sbatch script's SLURM_PROCID 0 and
  // SLURM_NTASKS, or `srun torchrun`'s one per node): they name this process, Slurm's do not.
  l = detect_launch(env_of({{"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "1"},
                            {"SLURM_LOCALID", "0"},
                            {"RANK", "1"},
                            {"WORLD_SIZE", "2"},
                            {"LOCAL_RANK", "1"},
                            {"MASTER_ADDR", "h"},
                            {"MASTER_PORT", "9"}}));
  EXPECT_EQ(l.launcher, Launcher::env);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);

  // The Hydra mpiexec (MPICH, Intel MPI), also inside a Slurm allocation: PMI_* name the process.
  l = detect_launch(env_of({{"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "1"},
                            {"PMI_RANK", "6"},
                            {"PMI_SIZE", "16"},
                            {"MPI_LOCALRANKID", "2"},
                            {"MASTER_ADDR", "node1"},
                            {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(l.launcher, Launcher::pmi);
  EXPECT_FALSE(l.under_mpi());  // this build's MPI is OpenMPI's: the NCCL id goes over TCP
  EXPECT_EQ(l.rank, 6);
  EXPECT_EQ(l.world_size, 16);
  EXPECT_EQ(l.local_rank, 2);
  EXPECT_EQ(l.master_addr, "node1");
  EXPECT_STREQ(launcher_name(l.launcher), "pmi");
  // Without MPI_LOCALRANKID (one node): the local rank is the rank.
  l = detect_launch(env_of({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}));
  EXPECT_EQ(l.launcher, Launcher::pmi);
  EXPECT_EQ(l.local_rank, 3);
  // `srun --mpi=pmi2`: PMI_* equal to srun's own SLURM_*, no MPI_LOCALRANKID: srun, whose
  // SLURM_LOCALID is the local rank (the PMI reading would take the rank, 9, on the second node).
  l = detect_launch(env_of({{"SLURM_PROCID", "9"},
                            {"SLURM_NTASKS", "16"},
                            {"SLURM_LOCALID", "1"},
                            {"PMI_RANK", "9"},
                            {"PMI_SIZE", "16"}}));
  EXPECT_EQ(l.launcher, Launcher::srun);
  EXPECT_EQ(l.rank, 9);
  EXPECT_EQ(l.local_rank, 1);
  // A step that gives SLURM_STEP_NUM_TASKS but not SLURM_NTASKS: the step's count.
  l = detect_launch(
      env_of({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(l.launcher, Launcher::srun);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);
  // mpirun's variables with torchrun-style ones that agree (one launcher's, exported twice).
  l = detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                            {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"RANK", "1"},
                            {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(l.launcher, Launcher::mpirun);
  // `mpiexec -n 2 -ppn 1 torchrun --nnodes 2 --nproc-per-node 4`, `srun torchrun`: more ranks
  // than tasks, read from the torchrun-style variables.
  l = detect_launch(env_of({{"PMI_RANK", "1"},
                            {"PMI_SIZE", "2"},
                            {"MPI_LOCALRANKID", "0"},
                            {"RANK", "5"},
                            {"WORLD_SIZE", "8"},
                            {"MASTER_ADDR", "h"},
                            {"MASTER_PORT", "9"}}));
  EXPECT_EQ(l.launcher, Launcher::env);
  EXPECT_EQ(l.rank, 5);
  l = detect_launch(env_of({{"SLURM_PROCID", "1"},
                            {"SLURM_STEP_NUM_TASKS", "2"},
                            {"RANK", "9"},
                            {"WORLD_SIZE", "16"},
                            {"MASTER_ADDR", "h"},
                            {"MASTER_PORT", "9"}}));
  EXPECT_EQ(l.launcher, Launcher::env);
  EXPECT_EQ(l.rank, 9);
}

// One process per GPU: a local rank past the node's devices is refused naming the rank, where
// its local rank came from, the device count and CUDA_VISIBLE_DEVICES; below it, accepted.
TEST(Launch, LocalRankPastTheDevicesIsRefused) {
  // One device that CUDA_VISIBLE_DEVICES chose for this rank (srun --gpus-per-task=1): device 0.
  const auto own = env_of({{"SLURM_PROCID", "3"},
                           {"SLURM_NTASKS", "4"},
                           {"SLURM_LOCALID", "3"},
                           {"CUDA_VISIBLE_DEVICES", "3"}});
  EXPECT_EQ(local_device(detect_launch(own), 1, own), 0);
  const auto mpi = env_of({{"OMPI_COMM_WORLD_RANK", "6"},
                           {"OMPI_COMM_WORLD_SIZE", "8"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                           {"CUDA_VISIBLE_DEVICES", "0,1"}});
  const LaunchInfo l = detect_launch(mpi);
  EXPECT_EQ(local_device(l, 4, mpi), 2);  // local rank 2 of 4 devices
  expect_error([&] { local_device(l, 2, mpi); },
               {"rank 6 of 8 (mpirun) has local rank 2 (OMPI_COMM_WORLD_LOCAL_RANK)",
                "sees 2 CUDA devices (CUDA_VISIBLE_DEVICES='0,1')", "at most 2 ranks per node"});
  // torchrun-style without LOCAL_RANK: the local rank is the rank.
  const auto tr = env_of(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}});
  expect_error([&] { local_device(detect_launch(tr), 1, tr); },
               {"rank 1 of 2 (env) has local rank 1 (the rank: LOCAL_RANK unset)",
                "sees 1 CUDA device:", "at most 1 rank per node"});
  EXPECT_STREQ(local_rank_variable(Launcher::srun), "SLURM_LOCALID");
  const auto pmi = env_of({{"PMI_RANK", "9"}, {"PMI_SIZE", "16"}, {"MPI_LOCALRANKID", "1"}});
  expect_error([&] { local_device(detect_launch(pmi), 1, pmi); },
               {"rank 9 of 16 (pmi) has local rank 1 (MPI_LOCALRANKID)", "sees 1 CUDA device"});
}

TEST(Launch, BadValuesNameTheVariable) {
  expect_error(
      [] {
        detect_launch(env_of({{"OMPI_COMM_WORLD_SIZE", "2"}}));
      },
      "environment variable OMPI_COMM_WORLD_RANK is not set");
  expect_error(
      [] {
        detect_launch(env_of({{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "0"}}));
      },
      "OMPI_COMM_WORLD_SIZE='two': expected an integer in [1, ");
  expect_error(
      [] {
        detect_launch(env_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}));
      },
      "SLURM_PROCID=4 is not below SLURM_NTASKS=4");
  // A task number without a task count would train alone; a launcher under mpirun hands down
  // mpirun's variables, which then disagree with its own.
  expect_error(
      [] {
        detect_launch(env_of({{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}}));
      },
      "SLURM_PROCID=1 but neither SLURM_NTASKS nor SLURM_STEP_NUM_TASKS is set");
  EXPECT_EQ(detect_launch(env_of({{"SLURM_PROCID", "0"}})).world_size, 1);
  expect_error(
      [] {
        detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "1"},
                              {"RANK", "1"},
                              {"WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "h"},
                              {"MASTER_PORT", "9"}}));
      },
      "OMPI_COMM_WORLD_RANK=0 and OMPI_COMM_WORLD_SIZE=1 and torchrun-style RANK=1 and "
      "WORLD_SIZE=2, which disagree");
  // The same with mpiexec (Hydra): `mpiexec -n 2 torchrun --standalone --nproc_per_node=1`.
  expect_error(
      [] {
        detect_launch(env_of({{"PMI_RANK", "1"},
                              {"PMI_SIZE", "2"},
                              {"MPI_LOCALRANKID", "1"},
                              {"RANK", "0"},
                              {"WORLD_SIZE", "1"}}));
      },
      "WORLD_SIZE=1 is smaller than mpiexec's PMI_SIZE=2");
  // `srun -n 2 torchrun --standalone`: each task a world of one.
  expect_error(
      [] {
        detect_launch(env_of({{"SLURM_PROCID", "1"},
                              {"SLURM_STEP_NUM_TASKS", "2"},
                              {"RANK", "0"},
                              {"WORLD_SIZE", "1"}}));
      },
      "WORLD_SIZE=1 is smaller than srun's SLURM_STEP_NUM_TASKS=2");
  expect_error(
      [] {
        detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
      },
      "WORLD_SIZE=2 but MASTER_ADDR and MASTER_PORT are not both set");
  expect_error(
      [] {
        detect_launch(env_of(
            {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}));
      },
      "MASTER_PORT='70000': expected an integer in [1, 65535]");
  expect_error([] { detect_launch(env_of({{"RANK", "-1"}, {"WORLD_SIZE", "1"}})); }, "RANK='-1'");
  expect_error(
      [] {
        detect_launch(env_of({{"PMI_SIZE", "4"}}));
      },
      "environment variable PMI_RANK is not set");
  expect_error(
      [] {
        detect_launch(env_of({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}}));
      },
      "PMI_RANK=4 is not below PMI_SIZE=4");
}

// A free port on localhost: bind port 0 and read back what the kernel chose (then release it).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

TEST(Rendezvous, TcpDeliversRankZerosBlobToEveryRank) {
  const int W = 4, port = free_port();
  const std::string blob = std::string("nccl-id\0with\xffzeros", 18) + std::string(109, 'x');
  std::vector<std::string> got(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> ranks;
  // Ranks 1..3 start before rank 0 listens: they retry until it does.
  for (int r = W - 1; r >= 0; --r) {
    ranks.emplace_back([&, r] {
      try {
        got[size_t(r)] =
            tcp_rendezvous(r == 0 ? blob : std::string(), r, W, "127.0.0.1", port, 20.0);
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
    });
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(got[size_t(r)], blob) << "rank " << r;
  }
}

TEST(Rendezvous, TcpTimesOutNamingWhatIsMissing) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { tcp_rendezvous("id", 0, 3, "", port, 0.3); }, "rank 0 waited 0.3 s on port");
  expect_error([&] { tcp_rendezvous("", 2, 3, "127.0.0.1", port, 0.3); },
               "rank 2 could not reach rank 0 at 127.0.0.1:");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  expect_error([&] { tcp_rendezvous("", 1, 2, "", port, 0.3); }, "MASTER_ADDR is empty");
}

TEST(Rendezvous, FileDeliversAndTimesOut) {
  test::TempDir dir;
  const std::string path = (std::filesystem::path(dir.path()) / "nccl_id").string();
  std::string got;
  std::thread reader([&] { got = file_rendezvous("", 1, path, 20.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(file_rendezvous("the id", 0, path, 20.0), "the id");
  reader.join();
  EXPECT_EQ(got, "the id");
  expect_error([&] { file_rendezvous("", 1, path + ".absent", 0.2); },
               "rank 1 waited 0.2 s (distributed.timeout_s) for rank 0 to write");
}

}  // namespace
}  // namespace attnlab
