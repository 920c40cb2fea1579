#pragma once
// A file that appears whole or not at all: written under a temporary name in its own directory,
// flushed, then renamed over the final name, so a reader (or a failed run) never meets half of it.
#include <string>
#include <string_view>

namespace mgt {

class AtomicFile {
 public:
  // Creates the temporary file next to `path` at once, so that a path that cannot be written is
  // refused before any work: throws IoError "<what> '<path>' cannot be written: <why>".
  AtomicFile(std::string path, std::string what);
  // Removes the temporary file unless commit() renamed it.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Writes `bytes` after what was appended, for a file made of parts: throws IoError naming the
  // path when it cannot.
  void append(std::string_view bytes);
  // Writes `bytes` as the rest of the file, flushes it and renames it to the path: throws IoError
  // naming the path (and leaves no file) when any of that fails.
  void commit(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& why) const;

  std::string path_, what_, temporary_;
  int fd_ = -1;
};

}  // namespace mgt
