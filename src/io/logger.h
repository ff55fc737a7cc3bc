// Rank-aware logging: in a multi-process run every rank holds a Logger, but only rank 0 prints
// and writes the metrics file, so output appears once. Messages go to one sink (stderr by
// default) as whole lines.
#pragma once
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "io/metrics.h"

namespace attnlab::io {

class Logger {
 public:
  // `color`: default is stderr_supports_color() when the sink is stderr, otherwise off.
  // A null sink makes a quiet logger: nothing is printed, metrics are still written.
  explicit Logger(int rank = 0, std::FILE* sink = stderr, std::optional<bool> color = {});

  int rank() const { return rank_; }
  bool is_main() const { return rank_ == 0; }
  bool color() const { return color_; }

  void info(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  // "warning: ..." (yellow with color).
  void warn(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void progress(const ProgressStats& s) const;

  // Metrics go to `path` (rank 0 only; other ranks ignore both calls). `resume_step` as in
  // MetricsWriter: set when resuming from a checkpoint.
  void open_metrics(const std::string& path, std::optional<int64_t> resume_step = {});
  void metrics(const nlohmann::json& record) const;

 private:
  void emit(const std::string& line) const;
  int rank_;
  std::FILE* sink_;
  bool color_;
  std::unique_ptr<MetricsWriter> metrics_;
};

}  // namespace attnlab::io
