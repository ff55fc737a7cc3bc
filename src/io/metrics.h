// Run-directory logging: a JSON-lines metrics file and the one-line progress report.
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::io {

// Appends one JSON object per line ({"step": 120, "loss": 3.45, ...}) to a file; every line goes
// out in a single write(2), so a crash loses at most the line being written and `tail -f` or a
// plotting script always sees whole records.
class MetricsWriter {
 public:
  // A fresh run: truncates any existing file.
  explicit MetricsWriter(const std::string& path);
  // Resuming from a checkpoint taken at `resume_step`: keeps the records with step <=
  // resume_step, drops the later ones (they will be logged again) and any partial line a crash
  // left behind, then appends. The file is cut back when the first record is written, so a
  // resume that fails before it leaves the file as it was. A missing file is fine.
  MetricsWriter(const std::string& path, int64_t resume_step);
  ~MetricsWriter();
  MetricsWriter(MetricsWriter&& o) noexcept;
  MetricsWriter& operator=(MetricsWriter&& o) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // `record` must be a JSON object with an integer "step". Non-finite numbers are written as null
  // (JSON has no NaN).
  void write(const nlohmann::json& record);

  const std::string& path() const { return path_; }
  // Records removed when resuming (later steps and unreadable lines).
  int64_t dropped_on_resume() const { return dropped_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t dropped_ = 0;
  std::optional<std::string> pending_cut_;  // the resume's kept records, until the first write
};

// One training step as the progress line reports it. NaN fields other than the loss are left out
// of the line (a NaN loss prints as "nan").
struct ProgressStats {
  int64_t step = 0;  // steps completed, 1-based
  int64_t total_steps = 0;
  double loss = NAN;
  double lr = NAN;
  double grad_norm = NAN;
  double tokens_per_s = NAN;
  double step_ms = NAN;
  double eta_s = NAN;  // NaN: estimated as step_ms * (total_steps - step)
  std::vector<std::pair<std::string, std::string>> extra;  // appended as "key value"
};

// "step  120/1000 | loss 3.4521 | lr 5.88e-04 | norm 0.912 | 12.3K tok/s | 245 ms | ETA 3m35s"
// One line per call, newline-terminated by the caller; never carriage returns or cursor
// movement, so redirected logs read the same as the terminal. With color, the step and loss are
// bold and the separators dim (ANSI SGR codes only).
class ProgressLine {
 public:
  explicit ProgressLine(bool color) : color_(color) {}
  std::string format(const ProgressStats& s) const;

 private:
  bool color_;
};

// "950", "12.3K", "1.23M", "4.57G": three significant digits.
std::string format_count(double v);
// "45s", "3m35s", "1h02m", "2d03h".
std::string format_duration(double seconds);
// True when stderr is a terminal, NO_COLOR is unset and TERM is not "dumb".
bool stderr_supports_color();

}  // namespace attnlab::io
