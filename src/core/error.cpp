#include "core/error.h"

#include <cstdarg>
#include <cstdlib>
#include <vector>

namespace attnlab {

std::string strformat(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), size_t(n) + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

void throw_error(const std::string& msg) { throw Error(msg); }

double shortest_double(float f) {
  for (int digits = 6; digits < 9; ++digits) {
    const double d = std::strtod(strformat("%.*g", digits, double(f)).c_str(), nullptr);
    if (float(d) == f) return d;
  }
  return double(f);
}

}  // namespace attnlab
