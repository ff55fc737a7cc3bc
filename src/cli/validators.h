// Option checks with plain messages ("--batch: must be >= 0, got -1"; CLI11's own range checks
// print their bound as a 300-digit number), and one that refuses an empty value.
#pragma once
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attnlab::cli {

// A number >= lo (strict: > lo).
inline CLI::Validator number_at_least(double lo, bool strict = false) {
  return CLI::Validator(
      [lo, strict](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
          return "expected a number, got '" + s + "'";
        if (strict ? v > lo : v >= lo) return "";
        char bound[32];
        std::snprintf(bound, sizeof(bound), "%g", lo);
        return std::string("must be ") + (strict ? "> " : ">= ") + bound + ", got " + s;
      },
      strict ? "NUMBER > 0" : "NUMBER >= 0");
}

// A whole number in [0, 2^64 - 1] (a seed: CLI11 wrapped one past that range silently).
inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        std::strtoull(s.c_str(), &end, 10);
        if (s.empty() || s[0] == '-' || end != s.c_str() + s.size())
          return "expected a whole number >= 0, got '" + s + "'";
        if (errno == ERANGE) return "must be <= 18446744073709551615, got " + s;
        return "";
      },
      "UINT64");
}

inline CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string { return s.empty() ? "needs " + what : ""; }, "");
}

}  // namespace attnlab::cli
