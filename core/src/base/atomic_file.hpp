#pragma once
// The one way mgtrain creates or opens a file for writing (open_for_writing), and the one way it
// replaces a file (AtomicFile): checkpoints and their `latest`, the converters' HDF5 files, the
// trace, the report, ONNX and .npy outputs.
//
// Root runs mgtrain in directories other users can write to, so nothing is ever written through a
// symbolic link planted at a name mgtrain writes (O_NOFOLLOW), and no output is a device, a FIFO
// or a socket (a FIFO would hang the run, a device would be written over). A replaced file is
// written under a temporary name beside the final one, ".NAME.tmp-<pid>-<random>" (which the
// checkpoint directory's clean-up recognises): unguessable, so that nobody can plant a link there
// before it exists, and created with O_EXCL, so that nothing already there is ever opened. It is
// flushed to the disk, renamed over the final name, and the rename made durable, so a reader (or a
// failed run) never meets half of it; the destructor removes the temporary unless it was renamed,
// and so does remove_unfinished_outputs_on_signals() when a command is interrupted.
// Written by hand: neither the standard library nor Boost offers a temp-fsync-rename write.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mgt {

enum class WriteOpen {
  create_new,  // O_CREAT | O_EXCL: a temporary or a probe; nothing at the name (a link neither)
  append,      // O_CREAT | O_APPEND: a file that grows by records (metrics, TensorBoard)
  lock,        // O_RDWR | O_CREAT, kept as it is: the checkpoint directory's lock file
};

// Opens `path` for writing as `how` says, never following a final symbolic link and refusing
// anything there that is not a regular file (before opening it: opening a device can act), or a
// file with another hard link (append, lock: it would be written in place). Returns
// the descriptor, or -1 with `why` saying why after the path's name ("is a symbolic link to 'T':
// mgtrain writes no file through a link ...", "is a FIFO, not a regular file ...", "cannot be
// created: <errno's text>").
int open_for_writing(const std::string& path, WriteOpen how, std::string& why);

// Why mgtrain will not write or replace `path`, said after its name, or "" when it may (nothing
// there, or a regular file): a symbolic link, a directory, a device, a FIFO or a socket.
std::string refused_output(const std::string& path);

// Throws IoError "<what> '<out>' is the input '<in>' ..." when `out` is one of `inputs`: the same
// file by device and inode, so another path to it or a hard link is caught too.
void refuse_output_that_is_input(const std::string& what, const std::string& out,
                                 const std::vector<std::string>& inputs);

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
  // For a writer with messages of its own: `describe` words them; `what` names the file in the
  // refusal of a path that is a link, a device or a FIFO ("<what> '<path>' is ..."), thrown here.
  // Creates nothing until create().
  AtomicFile(std::string path, std::string what, Describe describe);
  // Removes the temporary file unless rename() moved it.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates the temporary file for writing (O_EXCL: it is new).
  void create();
  // The temporary as a path that leads to the descriptor create() opened (/proc/self/fd/N), for a
  // library that opens the file by name itself (HDF5): it reaches this very file whatever is
  // done to the directory meanwhile. The temporary's name where /proc is not mounted.
  std::string descriptor_path() const;
  // Writes `bytes` after what was appended, for a file made of parts.
  void append(std::string_view bytes);
  // Flushes the temporary to the disk and closes it.
  void sync_and_close();
  // Renames the temporary over the path: from here on the file is the path's.
  void rename();
  // Writes `bytes` as the rest of the file, then sync_and_close(), rename() and a best-effort
  // sync of the directory (the file is complete either way).
  void commit(std::string_view bytes = {});

  // The temporary beside `path`: ".NAME.tmp-<pid>-<random>" in its directory; the same name for
  // the same path within one process.
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
  bool created_ = false;  // the temporary exists and is this object's to remove
  bool renamed_ = false;
};

// fsyncs the directory `dir`, so that renames and removals in it survive a crash. Throws IoError
// with describe's message for the step that failed (open_directory, sync_directory or
// close_directory).
void sync_directory(const std::string& dir, const AtomicFile::Describe& describe);

// For the commands that are not training (data convert, export, eval, report): SIGINT and SIGTERM
// remove the temporaries of the AtomicFiles not yet renamed, print "<line_start>stopped by
// SIGINT: 'OUT' was not written (its unfinished temporary is removed)" when there was one, and end
// the process by the signal (exit status 128 + the signal). The signals are taken by a thread of
// their own, as the training's stop signals are (stop_signal.hpp): call this before any other
// thread starts.
void remove_unfinished_outputs_on_signals(const std::string& line_start);

}  // namespace mgt
