// Ctrl-C (SIGINT) or SIGTERM (a scheduler's notice before it kills a job) during a single-process
// training run: the step in flight finishes, a checkpoint is written and the run stops, so that
// --resume continues it exactly (trainer.cpp); the CLI then ends by that signal (a shell loop of
// runs stops too). A second signal stops at once (the default action). A signal the process was
// started with ignored (a job started with & from a script) stays ignored. Several ranks keep the
// default action: a signal reaching the ranks at different steps would leave their collectives
// unmatched.
#pragma once

namespace attnlab {

class InterruptGuard {
 public:
  // Installs the handlers when `enabled`; the previous ones come back at destruction.
  explicit InterruptGuard(bool enabled);
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The signal received since construction (0: none).
  int signal() const;
  // Tests: raises SIGINT when the environment's ATTNLAB_TEST_INTERRUPT names `step`.
  static void test_hook(long long step);

 private:
  bool enabled_ = false;
};

}  // namespace attnlab
