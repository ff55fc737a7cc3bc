#include "io/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"

namespace attnlab::io {

// ---- MetricsWriter -----------------------------------------------------------------------------

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) ATTN_FAIL("cannot write '%s': %s", path_.c_str(), errno_text(errno).c_str());
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step) : path_(path) {
  if (std::filesystem::exists(path_)) {
    std::string text = read_file(path_);
    std::string kept;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) {  // partial last line from a crash
        ++dropped_;
        break;
      }
      std::string_view line(text.data() + pos, nl - pos);
      pos = nl + 1;
      if (line.empty()) continue;
      auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      auto step = rec.is_object() ? rec.find("step") : rec.end();
      if (rec.is_object() && step != rec.end() && step->is_number_integer() &&
          step->get<int64_t>() <= resume_step) {
        kept.append(line);
        kept += '\n';
      } else {
        ++dropped_;
      }
    }
    // Cut back at the first record, not now: a resume that fails before it logs anything leaves
    // the run's records as they were.
    if (dropped_ > 0) pending_cut_ = std::move(kept);
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) ATTN_FAIL("cannot write '%s': %s", path_.c_str(), errno_text(errno).c_str());
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

MetricsWriter::MetricsWriter(MetricsWriter&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      dropped_(o.dropped_),
      pending_cut_(std::move(o.pending_cut_)) {
  o.fd_ = -1;
}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    dropped_ = o.dropped_;
    pending_cut_ = std::move(o.pending_cut_);
    o.fd_ = -1;
  }
  return *this;
}

void MetricsWriter::write(const nlohmann::json& record) {
  ATTN_REQUIRE(fd_ >= 0, "metrics file '%s' is not open", path_.c_str());
  auto step = record.is_object() ? record.find("step") : record.end();
  ATTN_REQUIRE(record.is_object() && step != record.end() && step->is_number_integer(),
               "metrics record for '%s' must be an object with an integer \"step\", got %s",
               path_.c_str(), record.dump().c_str());
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (pending_cut_) {  // the resume's cut, then append to the new file
    write_file_atomic(path_, *pending_cut_);
    pending_cut_.reset();
    ::close(fd_);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) ATTN_FAIL("cannot write '%s': %s", path_.c_str(), errno_text(errno).c_str());
  }
  write_all(fd_, line.data(), line.size(), path_);
}

// ---- progress line ------------------------------------------------------------------------------

std::string format_count(double v) {
  static const char* kSuffix[] = {"", "K", "M", "G", "T"};
  int k = 0;
  while (std::abs(v) >= 999.5 && k < 4) {
    v /= 1000;
    ++k;
  }
  const char* fmt = k == 0 || std::abs(v) >= 99.95 ? "%.0f%s"
                    : std::abs(v) >= 9.995         ? "%.1f%s"
                                                   : "%.2f%s";
  return strformat(fmt, v, kSuffix[k]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = int64_t(std::llround(seconds));
  if (s < 60) return strformat("%llds", (long long)s);
  if (s < 3600) return strformat("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  if (s < 86400)
    return strformat("%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  return strformat("%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
}

bool stderr_supports_color() {
  if (!::isatty(STDERR_FILENO)) return false;
  if (std::getenv("NO_COLOR")) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

std::string ProgressLine::format(const ProgressStats& s) const {
  const char* bold = color_ ? "\033[1m" : "";
  const char* reset = color_ ? "\033[0m" : "";
  const std::string sep = color_ ? " \033[2m|\033[0m " : " | ";
  int width = int(std::to_string(s.total_steps).size());
  std::string out = strformat("step %s%*lld%s/%lld", bold, width, (long long)s.step, reset,
                              (long long)s.total_steps);
  // The loss is always shown: a NaN loss is exactly what the reader must see.
  out += sep + strformat("loss %s%.4f%s", bold, s.loss, reset);
  if (!std::isnan(s.lr)) out += sep + strformat("lr %.2e", s.lr);
  if (!std::isnan(s.grad_norm)) out += sep + strformat("norm %.3f", s.grad_norm);
  if (!std::isnan(s.tokens_per_s)) out += sep + format_count(s.tokens_per_s) + " tok/s";
  if (!std::isnan(s.step_ms))
    out += sep + strformat(s.step_ms < 9.95 ? "%.1f ms" : "%.0f ms", s.step_ms);
  for (const auto& [k, v] : s.extra) out += sep + k + " " + v;
  double eta = s.eta_s;
  if (std::isnan(eta) && !std::isnan(s.step_ms) && s.total_steps >= s.step)
    eta = s.step_ms * double(s.total_steps - s.step) / 1000.0;
  if (!std::isnan(eta)) out += sep + "ETA " + format_duration(eta);
  return out;
}

}  // namespace attnlab::io
