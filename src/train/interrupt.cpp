#include "train/interrupt.h"

#include <csignal>
#include <cstdlib>

namespace attnlab {
namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  g_signal = sig;
  // The next one takes the default action (the process stops at once).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

}  // namespace

InterruptGuard::InterruptGuard(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  g_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  if (!enabled_) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptGuard::signal() const { return enabled_ ? int(g_signal) : 0; }

void InterruptGuard::test_hook(long long step) {
  const char* v = std::getenv("ATTNLAB_TEST_INTERRUPT");
  if (v && std::atoll(v) == step) std::raise(SIGINT);
}

}  // namespace attnlab
