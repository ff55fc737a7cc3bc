// Ctrl-C (SIGINT) or SIGTERM (a scheduler's notice before it kills a job) during a training run:
// the step in flight finishes, a checkpoint is written and the run stops, so that --resume
// continues it exactly (trainer.cpp); the CLI then ends by that signal (a shell loop of runs stops
// too). A second signal stops at once (the default action). A signal the process was started with
// ignored (a job started with & from a script) stays ignored. Several ranks: the trainer's
// per-step all-reduce carries the signal, so that every rank stops after the same step even when
// the signal reaches them in different steps or reaches one of them only (docs/distributed.md:
// launchers kill their ranks a grace period after forwarding the signal).
#pragma once

namespace attnlab {

class InterruptGuard {
 public:
  // Installs the handlers; the previous ones come back at destruction.
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The signal received since construction (0: none).
  int signal() const;
  // Tests: raises SIGINT when the environment's ATTNLAB_TEST_INTERRUPT names `step`: "N" at the
  // start of step N (late false), "N+" after its loss all-reduce, before its evaluation and
  // checkpoint (late true).
  static void test_hook(long long step, bool late = false);
};

}  // namespace attnlab
