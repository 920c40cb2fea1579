#include "io/console.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>

namespace mgt::console {

namespace {

// Where file descriptor `fd` of process `pid` leads, as /proc names it ("/dev/pts/3", a file).
std::string fd_target(pid_t pid, int fd) {
  char target[512] = {};
  const std::string link = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

// Whether stderr shows where stdout does. Under mpirun a rank's streams are the launcher's pipes,
// so the launcher's own (the parent process's) decide.
bool stderr_joins_stdout() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    const std::string out = fd_target(getppid(), 1);
    return !out.empty() && out == fd_target(getppid(), 2);
  }
  struct stat out {
  }, err{};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::fstat(STDERR_FILENO, &err) == 0 && out.st_dev == err.st_dev &&
         out.st_ino == err.st_ino;
}

struct State {
  std::mutex mutex;
  std::ostream* bar_out = nullptr;  // set while a bar is drawn
  std::string bar;                  // as last drawn
  bool bar_cleared = false;         // its line cleared for other text, not drawn again yet
  bool text_line_open = false;      // text on bar_out whose line break has not come yet
};

State& state() {
  static State s;
  return s;
}

// The bar's line blanked, the cursor at its start. Spaces rather than an erase sequence: a bar
// may be drawn into a file (train.progress = bar).
void clear_bar(State& s) {
  if (!s.bar_out || s.bar_cleared) return;
  *s.bar_out << '\r' << std::string(s.bar.size(), ' ') << '\r' << std::flush;
  s.bar_cleared = true;
}

void redraw_bar(State& s) {
  if (!s.bar_out || !s.bar_cleared || s.text_line_open) return;
  *s.bar_out << s.bar << std::flush;
  s.bar_cleared = false;
}

// Whether a line meant for stderr goes to the bar's stream instead: stderr shows where it does.
bool joins_bar(const State& s) {
  static const bool joined = stderr_joins_stdout();
  return s.bar_out == &std::cout && joined;
}

}  // namespace

void draw_status(std::ostream& out, const std::string& text) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.bar_out == &out && s.text_line_open) out << '\n';  // a log line left open is ended first
  s.text_line_open = false;
  // Spaces over what a longer bar left on the line.
  const size_t drawn = s.bar_out == &out && !s.bar_cleared ? s.bar.size() : 0;
  out << '\r' << text << std::string(drawn > text.size() ? drawn - text.size() : 0, ' ') << std::flush;
  s.bar_out = &out;
  s.bar = text;
  s.bar_cleared = false;
}

void end_status() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.bar_out) return;
  if (!s.bar_cleared) *s.bar_out << '\n' << std::flush;
  s.bar_out = nullptr;
  s.bar.clear();
  s.bar_cleared = s.text_line_open = false;
}

void print(std::ostream& out, std::string_view text) {
  if (text.empty()) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.bar_out != &out) {
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    return;
  }
  clear_bar(s);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  s.text_line_open = text.back() != '\n';
  redraw_bar(s);
}

void warning(const std::string& line) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!joins_bar(s)) {
    std::cerr << line << std::flush;
    return;
  }
  clear_bar(s);
  std::cout << line << std::flush;
  redraw_bar(s);
}

void final_line(const std::string& line) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::ostream& out = joins_bar(s) ? std::cout : std::cerr;
  // The bar as last drawn stays, on a line of its own.
  if (s.bar_out && (!s.bar_cleared || s.text_line_open)) *s.bar_out << '\n' << std::flush;
  s.bar_out = nullptr;
  s.bar.clear();
  s.bar_cleared = s.text_line_open = false;
  out << line << std::flush;
}

}  // namespace mgt::console
