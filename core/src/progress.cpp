#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <ostream>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// Whether the person who launched the run is watching a terminal. Under mpirun a rank's stdout is
// a pseudo-terminal of Open MPI's even when mpirun writes to a file, so there the launcher's own
// stdout (the parent process's) decides.
bool output_is_terminal() {
  if (!isatty(STDOUT_FILENO)) return false;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return true;
  char target[256] = {};
  const std::string link = "/proc/" + std::to_string(getppid()) + "/fd/1";
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return false;
  const std::string where(target, static_cast<size_t>(n));
  return where.rfind("/dev/pts/", 0) == 0 || where.rfind("/dev/tty", 0) == 0;
}

}  // namespace

ProgressDisplay::ProgressDisplay(std::ostream& out, const std::string& mode, int64_t epochs,
                                 int64_t steps_per_epoch, int64_t first_step, int64_t total_steps)
    : out_(out), epochs_(epochs), per_epoch_(std::max<int64_t>(steps_per_epoch, 1)),
      first_step_(first_step), total_(total_steps) {
  if (mode != "auto" && mode != "bar" && mode != "lines")
    throw ConfigError("config key 'train.progress': expected auto, bar or lines, got '" + mode + "'");
  bar_ = mode == "bar" || (mode == "auto" && output_is_terminal());
}

void ProgressDisplay::step(int64_t step, int64_t epoch) {
  if (!bar_) return;
  const bool epoch_done = step % per_epoch_ == 0 || step == total_;
  const auto now = Clock::now();
  if (!epoch_done && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  draw(step, epoch_done && step % per_epoch_ == 0 ? step / per_epoch_ - 1 : epoch);
  if (epoch_done) {
    out_ << "\n" << std::flush;
    line_open_ = false;
  }
}

void ProgressDisplay::interval(int64_t step, int64_t epoch, double loss, double samples_per_s,
                               double data_wait_share) {
  loss_ = loss;
  rate_ = samples_per_s;
  has_loss_ = true;
  if (bar_) return;
  char line[256];
  std::snprintf(line, sizeof(line), "epoch %lld/%lld step %lld/%lld loss %.4f samples/s %.0f data-wait %.1f%%\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                static_cast<long long>(step), static_cast<long long>(total_), loss, samples_per_s,
                100.0 * data_wait_share);
  out_ << line << std::flush;
}

void ProgressDisplay::draw(int64_t step, int64_t epoch) {
  const int64_t in_epoch = step - epoch * per_epoch_;
  constexpr int kWidth = 30;
  const auto filled = static_cast<size_t>(kWidth * std::clamp<int64_t>(in_epoch, 0, per_epoch_) / per_epoch_);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const int64_t done = std::max<int64_t>(step - first_step_, 1);
  const auto eta = static_cast<int64_t>(elapsed / static_cast<double>(done) * static_cast<double>(total_ - step));
  char loss[32] = "-";
  if (has_loss_) std::snprintf(loss, sizeof(loss), "%.4f", loss_);
  char line[256];
  std::snprintf(line, sizeof(line), "\repoch %lld/%lld [%s] %lld/%lld  ETA %lld:%02lld  loss %s  %.0f samples/s ",
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), bar.c_str(),
                static_cast<long long>(in_epoch), static_cast<long long>(per_epoch_),
                static_cast<long long>(eta / 60), static_cast<long long>(eta % 60), loss, rate_);
  out_ << line << std::flush;
  line_open_ = true;
}

void ProgressDisplay::finish() {
  if (line_open_) out_ << "\n" << std::flush;
  line_open_ = false;
}

}  // namespace mgt
