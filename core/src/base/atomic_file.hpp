#pragma once
// A file that appears whole or not at all, the one way mgtrain replaces a file: checkpoints and
// their `latest`, the converters' HDF5 files, the trace, the report, ONNX and .npy outputs. It is
// written under a temporary name beside the final one (".NAME.tmp-PID", which the checkpoint
// directory's clean-up recognises), flushed to the disk, renamed over the final name, and the
// rename made durable, so a reader (or a failed run) never meets half of it; the destructor
// removes the temporary unless it was renamed. A path that is a device or a pipe (/dev/null,
// /dev/stdout) is written in place instead, so that the device itself is never replaced.
// Written by hand: neither the standard library nor Boost offers a temp-fsync-rename write.
#include <functional>
#include <string>
#include <string_view>

namespace mgt {

class AtomicFile {
 public:
  // The steps that can fail, for the message the writer gives.
  enum class Step { create, write, sync, close, rename, open_directory, sync_directory, close_directory };
  // Words a failed step with its errno; the step throws IoError with that message.
  using Describe = std::function<std::string(Step step, int error)>;

  // For an output named in a phrase ("ONNX file", "logits file"): creates the temporary at once,
  // so that a path that cannot be written is refused before any work. Throws IoError
  // "<what> '<path>' cannot be written: <why>", as every later step does.
  AtomicFile(std::string path, std::string what);
  // For a writer with messages of its own: `describe` words them. Creates nothing until create();
  // another library may instead write temporary() itself (the converters' HDF5 files).
  AtomicFile(std::string path, Describe describe);
  // Removes the temporary file unless rename() moved it.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates (or truncates) the temporary file for writing.
  void create();
  // Writes `bytes` after what was appended, for a file made of parts.
  void append(std::string_view bytes);
  // Flushes the temporary to the disk and closes it; opens it first when another library wrote it.
  void sync_and_close();
  // Renames the temporary over the path: from here on the file is the path's.
  void rename();
  // Writes `bytes` as the rest of the file, then sync_and_close(), rename() and a best-effort
  // sync of the directory (the file is complete either way).
  void commit(std::string_view bytes = {});

  // The temporary beside `path`: ".NAME.tmp-<pid>" in its directory.
  static std::string temporary_path(const std::string& path);
  const std::string& path() const { return path_; }
  const std::string& temporary() const { return temporary_; }
  // The directory of the path ("." for a bare name).
  const std::string& directory() const { return directory_; }

 private:
  [[noreturn]] void fail(Step step, int error) const;

  std::string path_, temporary_, directory_;
  Describe describe_;
  int fd_ = -1;
  bool renamed_ = false;
  bool in_place_ = false;  // the path is a device or a pipe: temporary_ is the path itself
};

// fsyncs the directory `dir`, so that renames and removals in it survive a crash. Throws IoError
// with describe's message for the step that failed (open_directory, sync_directory or
// close_directory).
void sync_directory(const std::string& dir, const AtomicFile::Describe& describe);

}  // namespace mgt
