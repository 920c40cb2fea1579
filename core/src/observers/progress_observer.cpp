// Rank 0's progress output. On a terminal: a live bar per epoch (steps, ETA, loss, samples/s)
// redrawn a few times a second. Elsewhere (batch logs): plain lines every train.log_every steps.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <ostream>
#include <string>

#include "io/console.hpp"
#include "mgtrain/error.hpp"
#include "observers/observer.hpp"

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

// Whether `out` takes a line now without making the training thread wait. Under mpirun a rank's
// stdout is Open MPI's pseudo-terminal of a few KB, which mpirun stops reading while it ends a job
// (from its SIGTERM until it kills the ranks): a progress line written then held the training
// thread, which never reached the stop, so the run ended without its final checkpoint. Such a
// line is left out; the metrics file has the figures.
bool takes_a_line_now(std::ostream& out) {
  if (&out != &std::cout) return true;
  pollfd stdout_fd{STDOUT_FILENO, POLLOUT, 0};
  return poll(&stdout_fd, 1, 0) != 0;  // 0: full; an error or a closed reader does not wait
}

// The bar, redrawn after steps and closed with a new line at each epoch's end; or a line per
// logging interval.
class ProgressObserver final : public TrainingCallback {
 public:
  // mode: "auto" (a bar when stdout is a terminal), "bar" or "lines". Throws ConfigError otherwise.
  ProgressObserver(std::ostream& out, const std::string& mode) : out_(out) {
    if (mode != "auto" && mode != "bar" && mode != "lines")
      throw ConfigError("config key 'train.progress': expected auto, bar or lines, got '" + mode + "'");
    bar_ = mode == "bar" || (mode == "auto" && output_is_terminal());
  }

  void on_run_start(const RunStart& run) override {
    per_epoch_ = std::max<int64_t>(run.steps_per_epoch, 1);
    // The epochs the run's steps reach: fewer than train.epochs where train.max_steps ends it.
    epochs_ = std::min(run.epochs, (run.total_steps + per_epoch_ - 1) / per_epoch_);
    first_step_ = run.first_step;
    total_ = run.total_steps;
    start_ = Clock::now();
  }

  // Redraws the bar at most five times a second; always at the run's last step. An epoch's last
  // step is on_epoch_end's to draw.
  void on_step_end(int64_t step, int64_t epoch) override {
    if (!bar_ || step % per_epoch_ == 0) return;
    const auto now = Clock::now();
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    draw(step, epoch);
    if (step == total_) end_line();
  }

  void on_epoch_end(int64_t step, int64_t epoch) override {
    if (!bar_) return;
    last_draw_ = Clock::now();
    draw(step, epoch);
    end_line();
  }

  // With the figures agreed over the ranks: the bar's loss and rate, or a line.
  void on_interval(const IntervalFigures& f) override {
    loss_ = f.loss;
    // A language model's rate is in tokens, what its users compare.
    rate_ = f.tokens_per_s > 0 ? f.tokens_per_s : f.samples_per_s;
    rate_unit_ = f.tokens_per_s > 0 ? "tokens/s" : "samples/s";
    has_loss_ = true;
    if (bar_ || !takes_a_line_now(out_)) return;
    char line[256];
    std::snprintf(line, sizeof(line), "epoch %lld/%lld step %lld/%lld loss %.4f %s %.0f data-wait %.1f%%\n",
                  static_cast<long long>(f.epoch + 1), static_cast<long long>(epochs_), static_cast<long long>(f.step),
                  static_cast<long long>(total_), f.loss, rate_unit_, rate_, 100.0 * f.data_wait_share);
    out_ << line << std::flush;
  }

  // A bar left open (a run stopped within an epoch) ends its line.
  void on_run_end(const RunEnd&) override {
    if (line_open_) end_line();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void draw(int64_t step, int64_t epoch) {
    if (!takes_a_line_now(out_)) return;
    const int64_t in_epoch = step - epoch * per_epoch_;
    // The steps of this epoch the run takes: the last one may end early, at train.max_steps.
    const int64_t epoch_steps = std::clamp<int64_t>(total_ - epoch * per_epoch_, 1, per_epoch_);
    constexpr int kWidth = 30;
    const auto filled = static_cast<size_t>(kWidth * std::clamp<int64_t>(in_epoch, 0, epoch_steps) / epoch_steps);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const int64_t done = std::max<int64_t>(step - first_step_, 1);
    const auto eta = static_cast<int64_t>(elapsed / static_cast<double>(done) * static_cast<double>(total_ - step));
    char loss[32] = "-";
    if (has_loss_) std::snprintf(loss, sizeof(loss), "%.4f", loss_);
    char line[256];
    std::snprintf(line, sizeof(line), "epoch %lld/%lld [%s] %lld/%lld  ETA %lld:%02lld  loss %s  %.0f %s ",
                  static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), bar.c_str(),
                  static_cast<long long>(in_epoch), static_cast<long long>(epoch_steps),
                  static_cast<long long>(eta / 60), static_cast<long long>(eta % 60), loss, rate_, rate_unit_);
    // Through the console, which keeps other lines printed meanwhile off the bar's line.
    console::draw_status(out_, line);
    line_open_ = true;
  }

  void end_line() {
    console::end_status();
    line_open_ = false;
  }

  std::ostream& out_;
  bool bar_ = false;
  int64_t epochs_ = 0, per_epoch_ = 1, first_step_ = 0, total_ = 0;
  double loss_ = 0, rate_ = 0;
  const char* rate_unit_ = "samples/s";
  bool has_loss_ = false, line_open_ = false;
  Clock::time_point start_ = Clock::now(), last_draw_{};
};

}  // namespace

std::unique_ptr<TrainingCallback> make_progress_observer(std::ostream& out, const std::string& mode) {
  return std::make_unique<ProgressObserver>(out, mode);
}

}  // namespace mgt
