#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "base/file_kind.hpp"
#include "base/stop_signal.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// 0, or the errno of the step that failed (in *failed).
int try_sync_directory(const std::string& dir, AtomicFile::Step* failed) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *failed = AtomicFile::Step::open_directory;
    return errno;
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    *failed = AtomicFile::Step::sync_directory;
    return err;
  }
  if (::close(fd) != 0) {
    *failed = AtomicFile::Step::close_directory;
    return errno;
  }
  return 0;
}

// "<pid>-<16 hex digits>": the process's own random part, drawn once per process (a forked child
// draws its own), so that another user cannot name a temporary before it exists.
std::string unguessable_suffix() {
  static std::mutex mutex;
  static pid_t drawn_for = 0;
  static std::string suffix;
  std::lock_guard lock(mutex);
  if (drawn_for != ::getpid()) {
    uint64_t random = 0;
    if (::getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
      // No getrandom (a kernel before 3.17): the clock's nanoseconds, still not known in advance.
      random = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15u;
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
    drawn_for = ::getpid();
    suffix = std::to_string(drawn_for) + "-" + hex;
  }
  return suffix;
}

// The temporaries not yet renamed or removed, for a command interrupted by a signal.
struct Unfinished {
  const AtomicFile* file;
  std::string temporary, path;
};
std::mutex unfinished_mutex;
std::vector<Unfinished> unfinished;

void forget_unfinished(const AtomicFile* file) {
  std::erase_if(unfinished, [file](const Unfinished& u) { return u.file == file; });
}

}  // namespace

std::string refused_output(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return "";  // nothing there (or the open says why)
  if (S_ISLNK(info.st_mode)) {
    char target[4096];
    const ssize_t length = ::readlink(path.c_str(), target, sizeof target);
    return "is a symbolic link to '" + (length > 0 ? std::string(target, static_cast<size_t>(length)) : "?") +
           "': mgtrain writes no file through a link (remove it, or name the file it leads to)";
  }
  if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
    return "is " + kind + ", not a regular file (mgtrain writes its outputs to regular files only)";
  return "";
}

int open_for_writing(const std::string& path, WriteOpen how, std::string& why) {
  // Looked at first so that a device is never opened (opening one can act: a tape rewinds); the
  // descriptor is checked again below, for what was put there in between.
  if (how != WriteOpen::create_new) {
    why = refused_output(path);
    if (!why.empty()) return -1;
  }
  int flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_CREAT;  // O_NONBLOCK: a FIFO does not hang the open
  switch (how) {
    case WriteOpen::create_new:
      flags |= O_WRONLY | O_EXCL;
      break;
    case WriteOpen::append:
      flags |= O_WRONLY | O_APPEND;
      break;
    case WriteOpen::lock:
      flags |= O_RDWR;
      break;
  }
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int error = errno;
    why = refused_output(path);  // ELOOP or EEXIST for a link: say it is one
    if (why.empty() || (error != ELOOP && error != EEXIST))
      why = std::string(how == WriteOpen::create_new ? "cannot be created: " : "cannot be opened for writing: ") +
            std::strerror(error);
    errno = error;
    return -1;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    why = std::string("cannot be looked at: ") + std::strerror(error);
    ::close(fd);
    errno = error;
    return -1;
  }
  if (!S_ISREG(info.st_mode)) {
    why = "is " + non_regular_kind(info.st_mode) +
          ", not a regular file (mgtrain writes its outputs to regular files only)";
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  // A file opened in place that has another name too is written through that name as well: a hard
  // link made by another user (where the kernel lets one link others' files) acts as a symbolic one.
  if (how != WriteOpen::create_new && info.st_nlink > 1) {
    why = "has " + std::to_string(info.st_nlink) +
          " hard links: mgtrain writes no file that is also another (remove it, or name another file)";
    ::close(fd);
    errno = EMLINK;
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void refuse_output_that_is_input(const std::string& what, const std::string& out,
                                 const std::vector<std::string>& inputs) {
  struct stat written {};
  if (::stat(out.c_str(), &written) != 0) return;  // not there yet: no input can be it
  for (const std::string& input : inputs) {
    struct stat read {};
    if (!input.empty() && ::stat(input.c_str(), &read) == 0 && read.st_dev == written.st_dev &&
        read.st_ino == written.st_ino)
      throw IoError(what + " '" + out + "' is the input '" + input +
                    "' (the same file): writing it would destroy what is read; give another output path");
  }
}

std::string AtomicFile::temporary_path(const std::string& path) {
  const std::filesystem::path target(path);
  std::string hidden = ".";  // "." + a temporary trips GCC 12's -Wrestrict false positive
  hidden += target.filename().string();
  hidden += ".tmp-" + unguessable_suffix();
  return target.has_parent_path() ? (target.parent_path() / hidden).string() : hidden;
}

AtomicFile::AtomicFile(std::string path, std::string what, Describe describe)
    : path_(std::move(path)), temporary_(temporary_path(path_)), describe_(std::move(describe)) {
  const std::filesystem::path target(path_);
  directory_ = target.has_parent_path() ? target.parent_path().string() : ".";
  // The rename would replace a link, a device or a FIFO rather than write through it (as root even
  // /dev/null): refused, as anything else mgtrain writes is.
  if (const std::string why = refused_output(path_); !why.empty()) throw IoError(what + " '" + path_ + "' " + why);
}

AtomicFile::AtomicFile(std::string path, std::string what)
    : AtomicFile(std::move(path), what, [this, what](Step step, int error) {
        const std::string why = step == Step::create
                                    ? "cannot create a file in directory '" + directory_ + "': " + std::strerror(error)
                                    : std::string(std::strerror(error));
        return what + " '" + path_ + "' cannot be written: " + why;
      }) {
  if (path_.empty()) throw IoError(what + ": no path given");
  create();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  std::lock_guard lock(unfinished_mutex);
  if (created_ && !renamed_) ::unlink(temporary_.c_str());
  forget_unfinished(this);
}

void AtomicFile::fail(Step step, int error) const { throw IoError(describe_(step, error)); }

void AtomicFile::create() {
  std::lock_guard lock(unfinished_mutex);
  std::string unused;  // describe_ words the errno
  fd_ = open_for_writing(temporary_, WriteOpen::create_new, unused);
  if (fd_ < 0) fail(Step::create, errno);
  created_ = true;
  unfinished.push_back({this, temporary_, path_});
}

std::string AtomicFile::descriptor_path() const {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
  struct stat by_proc {
  }, own{};
  if (fd_ >= 0 && ::stat(proc.c_str(), &by_proc) == 0 && ::fstat(fd_, &own) == 0 && by_proc.st_ino == own.st_ino &&
      by_proc.st_dev == own.st_dev)
    return proc;
  return temporary_;
}

void AtomicFile::append(std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Step::write, errno);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFile::sync_and_close() {
  if (fd_ < 0) fail(Step::sync, EBADF);  // create() was never called
  if (::fsync(fd_) != 0) fail(Step::sync, errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail(Step::close, errno);
}

void AtomicFile::rename() {
  // Under the lock: an interrupting signal either removes the temporary first or finds it renamed.
  std::lock_guard lock(unfinished_mutex);
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail(Step::rename, errno);
  renamed_ = true;
  forget_unfinished(this);
}

void AtomicFile::commit(std::string_view bytes) {
  append(bytes);
  sync_and_close();
  rename();
  Step ignored;
  try_sync_directory(directory_, &ignored);
}

void sync_directory(const std::string& dir, const AtomicFile::Describe& describe) {
  AtomicFile::Step failed;
  if (const int err = try_sync_directory(dir, &failed); err != 0) throw IoError(describe(failed, err));
}

void remove_unfinished_outputs_on_signals(const std::string& line_start) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, line_start] {
    int signal = -1;
    while (signal < 0) signal = sigwaitinfo(&set, nullptr);
    // Held until the process ends: no rename can follow the removal.
    unfinished_mutex.lock();
    std::string names;
    for (const Unfinished& u : unfinished) {
      ::unlink(u.temporary.c_str());
      names += (names.empty() ? "'" : ", '") + printable(u.path) + "'";
    }
    if (!names.empty()) {
      const std::string line = line_start + "stopped by " + (signal == SIGINT ? "SIGINT" : "SIGTERM") + ": " + names +
                               " was not written (its unfinished temporary is removed)\n";
      (void)!::write(STDERR_FILENO, line.data(), line.size());
    }
    // End as the signal would have ended the process: by its default action.
    end_by_default_action(signal);
  }).detach();
}

}  // namespace mgt
