#include "config/suggest.h"

#include <algorithm>
#include <cctype>

namespace attnlab {

int edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic-programming table: i-2, i-1 and i.
  const size_t n = b.size();
  std::vector<int> prev2(n + 1), prev(n + 1), cur(n + 1);
  for (size_t j = 0; j <= n; ++j) prev[j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = int(i);
    for (size_t j = 1; j <= n; ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);  // adjacent transposition
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[n];
}

static std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const int limit = std::max<int>(1, int(word.size()) / 3);
  const std::string w = lower(word);
  std::string best;
  int best_dist = limit + 1;
  for (const std::string& c : candidates) {
    int d = edit_distance(w, lower(c));
    if (d < best_dist) {
      best_dist = d;
      best = c;
    }
  }
  return best;
}

std::string join_names(const std::vector<std::string>& names, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += sep;
    out += names[i];
  }
  return out;
}

}  // namespace attnlab
