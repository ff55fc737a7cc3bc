// The note appended to out-of-memory errors of Buffer (core/tensor.h): the trainer sets the run's
// memory estimate and a hint, so a rank that runs out of memory mid-run says what it needed.
#pragma once
#include <string>

namespace attnlab {

void set_out_of_memory_note(std::string note);  // "" clears it

}  // namespace attnlab
