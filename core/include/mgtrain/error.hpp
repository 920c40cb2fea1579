#pragma once
// The core's one exception family. Every message names the thing at fault and, where it applies,
// what was expected and what was found; the launcher prints it once as
// "mgtrain: error: [rank R] <message>".
#include <stdexcept>
#include <string>

#include "mgtrain/export.hpp"

namespace mgt {

class MGT_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class MGT_API ConfigError : public Error {
  using Error::Error;
};
class MGT_API DataError : public Error {
  using Error::Error;
};
class MGT_API PluginError : public Error {
  using Error::Error;
};
class MGT_API CommError : public Error {
  using Error::Error;
};
class MGT_API CudaError : public Error {
  using Error::Error;
};
// A device allocation that did not fit: the GPU path may retry with a smaller micro-batch.
class MGT_API OutOfMemoryError : public CudaError {
  using CudaError::CudaError;
};
class MGT_API IoError : public Error {
  using Error::Error;
};

}  // namespace mgt

// Raises `type` with the message when `cond` is false.
#define MGT_CHECK(cond, type, message) \
  do {                                 \
    if (!(cond)) throw type(message);  \
  } while (0)
