// The note appended to out-of-memory errors of Buffer (core/tensor.h): the trainer sets the run's
// memory estimate and a hint, so a rank that runs out of memory mid-run says what it needed.
#pragma once
#include <string>
#include <utility>

namespace attnlab {

void set_out_of_memory_note(std::string note);  // "" clears it
const std::string& current_out_of_memory_note();

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
