// The note appended to out-of-memory errors of Buffer (core/tensor.h): the trainer sets the run's
// memory estimate and a hint, so a rank that runs out of memory mid-run says what it needed.
#pragma once
#include <string>
#include <utility>

namespace attnlab {

void set_out_of_memory_note(std::string note);  // "" clears it
const std::string& current_out_of_memory_note();
// What an out-of-GPU-memory error adds after naming the allocation: " (F MiB free of T MiB)" where
// the device answers, then "; " and the note, or a hint where no note is set. Buffer's errors and
// every CUDA_CHECK that fails with cudaErrorMemoryAllocation (the launchers' StreamScratch, cuBLAS
// workspaces) end with it.
std::string gpu_out_of_memory_detail();

// Sets the note for a scope (a command that is not training: generate) and puts back the one
// before it at the end.
class OutOfMemoryNote {
 public:
  explicit OutOfMemoryNote(std::string note) : before_(current_out_of_memory_note()) {
    set_out_of_memory_note(std::move(note));
  }
  ~OutOfMemoryNote() { set_out_of_memory_note(std::move(before_)); }
  OutOfMemoryNote(const OutOfMemoryNote&) = delete;
  OutOfMemoryNote& operator=(const OutOfMemoryNote&) = delete;

 private:
  std::string before_;
};

}  // namespace attnlab
