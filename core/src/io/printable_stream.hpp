#pragma once
// An output stream for text that quotes what came from users and files (config values, paths,
// checkpoint and data file contents): every control byte but the line break is written as \xNN,
// as printable() writes error lines, so a value can neither move the terminal's cursor nor hide
// what follows it. Nothing is held back: each write goes on to the wrapped stream at once (around
// a progress bar drawn there: console.hpp), so writes to that stream itself keep their order.
#include <algorithm>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>

#include "io/console.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace detail {

class PrintableBuffer : public std::streambuf {
 public:
  explicit PrintableBuffer(std::ostream& out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char byte = traits_type::to_char_type(c);
    write({&byte, 1});
    return c;
  }
  std::streamsize xsputn(const char* text, std::streamsize n) override {
    write({text, static_cast<size_t>(n)});
    return n;
  }
  int sync() override { return out_.flush() ? 0 : -1; }

 private:
  void write(std::string_view text) {
    std::string escaped;
    for (size_t start = 0; start < text.size();) {
      const size_t end = std::min(text.find('\n', start), text.size());
      escaped += printable(std::string(text.substr(start, end - start)));
      if (end < text.size()) escaped += '\n';
      start = end + 1;
    }
    console::print(out_, escaped);
  }

  std::ostream& out_;
};

// Holds the buffer so that it is built before the std::ostream that writes into it.
struct PrintableBufferHolder {
  explicit PrintableBufferHolder(std::ostream& out) : buffer(out) {}
  PrintableBuffer buffer;
};

}  // namespace detail

class PrintableStream : private detail::PrintableBufferHolder, public std::ostream {
 public:
  explicit PrintableStream(std::ostream& out) : detail::PrintableBufferHolder(out), std::ostream(&buffer) {}
};

}  // namespace mgt
