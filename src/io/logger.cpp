#include "io/logger.h"

#include <cstdarg>

#include "core/error.h"

namespace attnlab::io {
namespace {

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), size_t(n) + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

}  // namespace

Logger::Logger(int rank, std::FILE* sink, std::optional<bool> color)
    : rank_(rank), sink_(sink), color_(color.value_or(sink == stderr && stderr_supports_color())) {
  ATTN_REQUIRE(rank >= 0, "logger: rank must be >= 0, got %d", rank);
}

void Logger::emit(const std::string& line) const {
  if (!is_main() || sink_ == nullptr) return;  // a null sink is a quiet logger (metrics only)
  // One fputs per line, flushed at once, so lines interleave whole with other output.
  std::string text = line + "\n";
  std::fputs(text.c_str(), sink_);
  std::fflush(sink_);
}

void Logger::info(const char* fmt, ...) const {
  if (!is_main()) return;
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  emit(msg);
}

void Logger::warn(const char* fmt, ...) const {
  if (!is_main()) return;
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  emit(color_ ? "\033[33mwarning:\033[0m " + msg : "warning: " + msg);
}

void Logger::progress(const ProgressStats& s) const {
  if (!is_main()) return;
  emit(ProgressLine(color_).format(s));
}

void Logger::open_metrics(const std::string& path, std::optional<int64_t> resume_step) {
  if (!is_main()) return;
  metrics_ = resume_step ? std::make_unique<MetricsWriter>(path, *resume_step)
                         : std::make_unique<MetricsWriter>(path);
}

void Logger::metrics(const nlohmann::json& record) const {
  if (!is_main() || !metrics_) return;
  metrics_->write(record);
}

}  // namespace attnlab::io
