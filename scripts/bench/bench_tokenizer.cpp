// Tokenizer throughput and a file encoder for the exactness check.
//
//   bench_tokenizer bench <spec> <text file> [threads=1] [repeats=3]
//       Prints MB/s with cold and with warm per-thread caches. With threads > 1 the text is cut
//       at line boundaries into `threads` contiguous parts encoded concurrently (a cut can change
//       the tokens next to it; the benchmark reports speed only).
//   bench_tokenizer encode <spec> <text file> <ids out>
//       Writes the ids of the whole file as little-endian int32 (scripts/tokenizer_exactness.py).
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ATTN_REQUIRE(f.good(), "bench_tokenizer: cannot open '%s'", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Cuts text into n parts at newlines, as evenly as possible.
std::vector<std::string_view> split_parts(std::string_view text, int n) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (int i = 1; i <= n; ++i) {
    size_t end = text.size() * i / n;
    if (i < n) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    } else {
      end = text.size();
    }
    if (end < begin) end = begin;
    parts.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return parts;
}

// Each repeat runs `threads` fresh threads (fresh per-thread caches): every thread encodes its
// part once with a cold cache, then, after all have finished, once more with the cache warm.
// Reported: the best wall time of each phase over the repeats.
int bench(const std::string& spec, const std::string& path, int threads, int repeats) {
  ATTN_REQUIRE(threads >= 1 && repeats >= 1, "bench_tokenizer: threads and repeats must be >= 1");
  const auto tok = attnlab::make_tokenizer(spec);
  const std::string text = read_all(path);
  const auto parts = split_parts(text, threads);
  std::vector<std::vector<int32_t>> ids(threads);
  double best_cold = 1e30, best_warm = 1e30;
  for (int r = 0; r < repeats; ++r) {
    std::barrier sync(threads + 1);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        for (int phase = 0; phase < 2; ++phase) {
          sync.arrive_and_wait();
          ids[i].clear();
          tok->encode(parts[i], ids[i]);
          sync.arrive_and_wait();
        }
      });
    }
    double t[4];
    for (double& ti : t) {
      sync.arrive_and_wait();
      ti = now_s();
    }
    for (auto& th : pool) th.join();
    best_cold = std::min(best_cold, t[1] - t[0]);
    best_warm = std::min(best_warm, t[3] - t[2]);
  }
  size_t n_ids = 0;
  for (auto& v : ids) n_ids += v.size();
  const double mb = double(text.size()) / 1e6;
  std::printf("tokenizer=%s threads=%d bytes=%zu tokens=%zu cold_MB/s=%.2f warm_MB/s=%.2f\n",
              tok->name().c_str(), threads, text.size(), n_ids, mb / best_cold, mb / best_warm);
  return 0;
}

int encode_file(const std::string& spec, const std::string& path, const std::string& out_path) {
  const auto tok = attnlab::make_tokenizer(spec);
  const std::string text = read_all(path);
  std::vector<int32_t> ids;
  tok->encode(text, ids);
  std::ofstream f(out_path, std::ios::binary);
  ATTN_REQUIRE(f.good(), "bench_tokenizer: cannot write '%s'", out_path.c_str());
  f.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 4));
  ATTN_REQUIRE(f.good(), "bench_tokenizer: error writing '%s'", out_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "bench" && argc >= 4) {
      return bench(argv[2], argv[3], argc > 4 ? std::atoi(argv[4]) : 1,
                   argc > 5 ? std::atoi(argv[5]) : 3);
    }
    if (mode == "encode" && argc == 5) return encode_file(argv[2], argv[3], argv[4]);
    std::fprintf(stderr,
                 "usage: bench_tokenizer bench <spec> <text file> [threads] [repeats]\n"
                 "       bench_tokenizer encode <spec> <text file> <ids out (int32)>\n");
    return 2;
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
