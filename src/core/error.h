// attnlab errors: one exception type for everything a user can cause (bad recipe, bad file, bad
// shape), with a printf-style message. The CLI catches it, prints the message and exits non-zero.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace attnlab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// printf-style formatting into a std::string.
std::string strformat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The shortest decimal that rounds to `f`, as a double (1e-5f -> 1e-05, not 9.99999975e-06): for
// writing a float setting where readers parse doubles (recipes, config.json).
double shortest_double(float f);

[[noreturn]] void throw_error(const std::string& msg);

}  // namespace attnlab

// REQUIRE(cond, fmt, ...): user-facing precondition. Throws attnlab::Error with the message.
#define ATTN_REQUIRE(cond, ...)                                             \
  do {                                                                      \
    if (!(cond)) ::attnlab::throw_error(::attnlab::strformat(__VA_ARGS__)); \
  } while (0)

// FAIL(fmt, ...): unconditional user-facing error.
#define ATTN_FAIL(...) ::attnlab::throw_error(::attnlab::strformat(__VA_ARGS__))

// Internal invariant (a bug in attnlab, not in the user's input); names file:line.
#define ATTN_ASSERT(cond)                                                                         \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::attnlab::throw_error(                                                                     \
          ::attnlab::strformat("internal error: %s failed at %s:%d", #cond, __FILE__, __LINE__)); \
  } while (0)
