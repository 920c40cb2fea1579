#pragma once
// The core's one exception family. Every message names the thing at fault and, where it applies,
// what was expected and what was found; the launcher prints it once as
// "mgtrain: error: [rank R] <message>".
#include <stdexcept>
#include <string>

namespace mgt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class ConfigError : public Error { using Error::Error; };
class DataError : public Error { using Error::Error; };
class PluginError : public Error { using Error::Error; };
class CommError : public Error { using Error::Error; };
class CudaError : public Error { using Error::Error; };
// A device allocation that did not fit: the GPU path may retry with a smaller micro-batch.
class OutOfMemoryError : public CudaError { using CudaError::CudaError; };
class IoError : public Error { using Error::Error; };

}  // namespace mgt

// Raises `type` with the message when `cond` is false.
#define MGT_CHECK(cond, type, message)        \
  do {                                        \
    if (!(cond)) throw type(message);         \
  } while (0)
