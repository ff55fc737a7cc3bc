#include "train/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <string>

namespace attnlab {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler stores to it");
struct sigaction g_old_int, g_old_term;
bool g_have_int = false, g_have_term = false;

void on_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

// Installs on_signal for `sig` unless the process was started with it ignored (a job started
// with & from a script): that stays ignored. SA_RESETHAND: a second one takes the default action.
bool install(int sig, struct sigaction* old) {
  if (sigaction(sig, nullptr, old) != 0 || old->sa_handler == SIG_IGN) return false;
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  return sigaction(sig, &sa, nullptr) == 0;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  g_have_int = install(SIGINT, &g_old_int);
  g_have_term = install(SIGTERM, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  if (g_have_int) sigaction(SIGINT, &g_old_int, nullptr);
  if (g_have_term) sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptGuard::signal() const { return g_signal.load(); }

void InterruptGuard::test_hook(long long step, bool late) {
  const char* v = std::getenv("ATTNLAB_TEST_INTERRUPT");
  if (!v) return;
  const std::string when(v);
  const bool wants_late = !when.empty() && when.back() == '+';
  if (wants_late == late && std::atoll(v) == step) std::raise(SIGINT);
}

}  // namespace attnlab
