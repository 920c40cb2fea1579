#pragma once
// Out of host memory, in the words docs/troubleshooting.md promises ("out of host memory ..."),
// never as "std::bad_alloc": where the code knows what it was allocating, it throws
// HostMemoryError naming it; where a std::bad_alloc is caught with nothing more known, the line
// says what was running and what to lower.
#include <stdexcept>
#include <string>

namespace mgt {

// `what`: the allocation, e.g. "reading dataset '/params/W' of checkpoint 'P' (8192 MiB)".
class HostMemoryError : public std::runtime_error {
 public:
  explicit HostMemoryError(const std::string& what) : std::runtime_error("out of host memory " + what) {}
};

// What a training rank holds most of: the micro-batch's activations and the data read ahead.
inline constexpr const char* kLowerTheMicroBatch =
    "lower the micro-batch (sync.name = grad_accum with more sync.accum_steps keeps the global batch) or "
    "data.prefetch";

// At start-up the model's parameters, gradients and optimizer state are allocated too.
inline constexpr const char* kLowerTheModelOrMicroBatch =
    "lower the model's sizes (model.* keys), or the micro-batch (sync.name = grad_accum with more "
    "sync.accum_steps keeps the global batch) or data.prefetch";

// The text for a std::bad_alloc caught in `during` ("the run's start-up", "mgtrain compare").
inline std::string out_of_host_memory(const std::string& during, const std::string& advice) {
  return "out of host memory during " + during + ": " + advice;
}

}  // namespace mgt
