#pragma once
// The core's one exception family. Every message names the thing at fault and, where it applies,
// what was expected and what was found; the launcher prints it once as
// "mgtrain: error: [rank R] <message>".
#include <stdexcept>
#include <string>

#include "mgtrain/export.hpp"

namespace mgt {

// `text` with every control byte (NUL, line breaks, escape sequences, DEL) written as \xNN: a
// message quotes user input (file contents, paths, arguments), which must neither end the message
// at a NUL nor move the terminal's cursor. Other bytes, UTF-8 included, are kept; a backslash is
// kept too, so escaping twice changes nothing.
inline std::string printable(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
  }
  return out;
}

class MGT_API Error : public std::runtime_error {
 public:
  // Escaped here, where every message passes, since what() is read as a C string.
  explicit Error(const std::string& message) : std::runtime_error(printable(message)) {}
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
