// Rank 0's observers of a run, driven as the trainer drives them: the metrics line, the progress
// lines and bar, the slow-rank warning and TensorBoard's event file, each with the text the e2e
// tests and people read.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "io/printable_stream.hpp"
#include "mgtrain/error.hpp"
#include "observers/observer.hpp"

using namespace mgt;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temporary one, removed with the fixture.
class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("mgtrain-observers-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

IntervalFigures figures(int64_t step, int64_t epoch) {
  IntervalFigures f;
  f.step = step;
  f.epoch = epoch;
  f.loss = 1.5;
  f.accuracy = 0.25;
  f.samples_per_s = 1234.4;
  f.data_wait_share = 0.125;
  f.learning_rate = 0.5;
  f.grad_norm = 2.5;
  f.time_s = 2.0;
  f.rss_mb = 100.5;
  f.open_fds = 12;
  f.rank_step_ms = {10.0, 12.5};
  return f;
}

// Steps first..last as the trainer reports them: an epoch ends every `per_epoch` steps.
void run_steps(TrainingCallback& o, int64_t first, int64_t last, int64_t per_epoch) {
  for (int64_t step = first; step <= last; ++step) {
    const int64_t epoch = (step - 1) / per_epoch;
    o.on_step_end(step, epoch);
    if (step % per_epoch == 0) o.on_epoch_end(step, epoch);
  }
}

}  // namespace

TEST(MetricsFile, OneLinePerIntervalAppended) {
  TempDir dir;
  const fs::path path = dir.path() / "sub" / "metrics.jsonl";
  {
    auto metrics = make_metrics_file(path.string());  // creates the directory
    metrics->on_interval(figures(5, 0));
    IntervalFigures diverged = figures(10, 1);
    diverged.loss = std::numeric_limits<double>::quiet_NaN();
    diverged.gpu = {GpuSample{true, 93, 1024.5, 2048, 51}};
    metrics->on_interval(diverged);
  }
  make_metrics_file(path.string())->on_interval(figures(15, 1));  // appends
  std::ifstream in(path);
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  std::getline(in, third);
  EXPECT_EQ(first, R"({"step":5,"epoch":1,"loss":1.5,"accuracy":0.25,"samples_per_s":1234.4,)"
                   R"("data_wait_share":0.125,"lr":0.5,"grad_norm":2.5,"time_s":2,"rss_mb":100.5,"open_fds":12,)"
                   R"("rank_step_ms":[10,12.5]})");
  EXPECT_EQ(second, R"({"step":10,"epoch":2,"loss":null,"accuracy":0.25,"samples_per_s":1234.4,)"
                    R"("data_wait_share":0.125,"lr":0.5,"grad_norm":2.5,"time_s":2,"rss_mb":100.5,"open_fds":12,)"
                    R"("rank_step_ms":[10,12.5],)"
                    R"("gpu":[{"util":93,"mem_used_mb":1024.5,"mem_total_mb":2048,"temp_c":51}]})");
  EXPECT_EQ(third.rfind(R"({"step":15,)", 0), 0u) << third;
}

// An evaluation of the test file after an epoch: its own record, told apart by its test_ fields.
TEST(MetricsFile, EvaluationRecord) {
  TempDir dir;
  const fs::path path = dir.path() / "metrics.jsonl";
  {
    auto metrics = make_metrics_file(path.string());
    metrics->on_interval(figures(8, 0));
    metrics->on_evaluation({8, 0, 0.7123, 0.81234567891, 10000, "test.h5"});
  }
  std::ifstream in(path);
  std::string interval, evaluation;
  std::getline(in, interval);
  std::getline(in, evaluation);
  EXPECT_EQ(evaluation, R"({"step":8,"epoch":1,"test_accuracy":0.7123,"test_loss":0.812345679,"test_samples":10000})");
}

TEST(MetricsFile, UnwritablePathIsNamed) {
  TempDir dir;
  fs::create_directories(dir.path());
  const std::string path = dir.path().string();  // a directory, not a file
  try {
    make_metrics_file(path);
    FAIL() << "a directory opened as the metrics file";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    // The reason, as a refusal of anything but a regular file says it.
    EXPECT_NE(std::string(e.what()).find("' is a directory, not a regular file"), std::string::npos) << e.what();
  }
}

// A metrics line that cannot be written is a warning naming the file and the reason, once; the
// run goes on with the metrics off. The file may not grow (RLIMIT_FSIZE, SIGXFSZ ignored as
// mgtrain ignores it): every write fails with EFBIG, as on a full disk with ENOSPC (e2e.full_disk).
TEST(MetricsFile, AFailedWriteWarnsOnceAndTurnsTheMetricsOff) {
  TempDir dir;
  fs::create_directories(dir.path());
  const std::string path = (dir.path() / "metrics.jsonl").string();
  // Already at the limit, which the captured stderr's file stays under.
  constexpr size_t kLimit = 4096;
  std::ofstream(path) << std::string(kLimit - 1, ' ') << '\n';
  auto metrics = make_metrics_file(path);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit none = before;
  none.rlim_cur = kLimit;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &none), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(metrics->on_interval(figures(5, 0)));
  EXPECT_NO_THROW(metrics->on_interval(figures(10, 0)));
  EXPECT_NO_THROW(metrics->on_run_end({10, 0, false}));
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(warnings, "mgtrain: warning: metrics file '" + path +
                          "' cannot be written: File too large; metrics are off for the rest of the run\n");
  EXPECT_EQ(fs::file_size(path), kLimit);
}

// The metrics file is never opened through a symbolic link (a dangling one would create what it
// leads to), nor as a device.
TEST(MetricsFile, ALinkOrADeviceIsRefused) {
  TempDir dir;
  fs::create_directories(dir.path());
  const std::string link = (dir.path() / "metrics.jsonl").string(), victim = (dir.path() / "victim").string();
  fs::create_symlink(victim, link);
  for (const std::string& path : {link, std::string("/dev/full")}) {
    try {
      make_metrics_file(path);
      ADD_FAILURE() << path << " was opened";
    } catch (const mgt::IoError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("metrics file '" + path + "' is a ", 0), 0u) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(victim));
}

TEST(ProgressObserver, LinesAtIntervalsOnly) {
  std::ostringstream out;
  auto progress = make_progress_observer(out, "lines");
  progress->on_run_start({2, 10, 0, 20});
  run_steps(*progress, 1, 4, 10);
  EXPECT_EQ(out.str(), "");
  progress->on_interval(figures(5, 0));
  run_steps(*progress, 5, 20, 10);
  progress->on_run_end({20, 1, false});
  EXPECT_EQ(out.str(), "epoch 1/2 step 5/20 loss 1.5000 samples/s 1234 data-wait 12.5%\n");
}

TEST(ProgressObserver, BarEndsEachEpochAndTheRunWithANewLine) {
  std::ostringstream out;
  auto progress = make_progress_observer(out, "bar");
  // 4 steps an epoch, 6 in all: the second epoch ends early, at the run's last step, and its bar
  // counts the 2 steps it has.
  progress->on_run_start({2, 4, 0, 6});
  run_steps(*progress, 1, 6, 4);
  progress->on_run_end({6, 1, false});
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_NE(text.find("\repoch 1/2 [##############################] 4/4  ETA"), std::string::npos) << text;
  EXPECT_NE(text.find("\repoch 2/2 [##############################] 2/2  ETA 0:00"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  // The line for epoch 1's end is drawn once, by the epoch's end.
  EXPECT_EQ(text.find("] 4/4"), text.rfind("] 4/4")) << text;
}

// train.max_steps ends the run before train.epochs: the bar counts the epochs and steps the run
// takes, not 10 epochs of 468 steps.
TEST(ProgressObserver, BarCountsWhatMaxStepsLeaves) {
  std::ostringstream out;
  auto progress = make_progress_observer(out, "bar");
  progress->on_run_start({10, 468, 0, 300});
  run_steps(*progress, 1, 300, 468);
  progress->on_run_end({300, 0, false});
  std::string text = out.str();
  EXPECT_NE(text.find("\repoch 1/1 [##############################] 300/300  ETA 0:00"), std::string::npos) << text;
  EXPECT_EQ(text.find("/10 "), std::string::npos) << text;
  EXPECT_EQ(text.find("/468"), std::string::npos) << text;
  // Three epochs' worth: two whole, the third of 1000 - 936 = 64 steps.
  std::ostringstream longer;
  progress = make_progress_observer(longer, "bar");
  progress->on_run_start({10, 468, 0, 1000});
  run_steps(*progress, 1, 1000, 468);
  progress->on_run_end({1000, 2, false});
  text = longer.str();
  EXPECT_NE(text.find("\repoch 2/3 [##############################] 468/468"), std::string::npos) << text;
  EXPECT_NE(text.find("\repoch 3/3 [##############################] 64/64"), std::string::npos) << text;
  // In lines mode too.
  std::ostringstream lines;
  progress = make_progress_observer(lines, "lines");
  progress->on_run_start({10, 468, 0, 300});
  progress->on_interval(figures(100, 0));
  EXPECT_EQ(lines.str().rfind("epoch 1/1 step 100/300 ", 0), 0u) << lines.str();
}

// A line printed while the bar is drawn (the slow-rank warning, through rank 0's log) clears the
// bar's line first and draws the bar again after it: it never lands in the middle of the bar.
TEST(ProgressObserver, ALineWhileTheBarIsDrawnGetsALineOfItsOwn) {
  std::ostringstream out;
  PrintableStream log(out);
  auto progress = make_progress_observer(out, "bar");
  auto slow = make_slow_rank_warning(log);
  progress->on_run_start({1, 100, 0, 100});
  run_steps(*progress, 1, 1, 100);
  IntervalFigures f = figures(1, 0);
  f.rank_step_ms = {2.0, 20.0};
  slow->on_interval(f);
  log << "a log line in two parts, " << std::flush;
  log << "then its end\n";
  progress->on_run_end({1, 0, true});
  const std::string text = out.str();
  const size_t warning = text.find("warning: rank 1");
  ASSERT_NE(warning, std::string::npos) << text;
  // Between the bar's text and the warning: a carriage return, blanks over the bar, another.
  const size_t bar_end = text.rfind("samples/s", warning);
  ASSERT_NE(bar_end, std::string::npos) << text;
  const std::string between = text.substr(bar_end + 10, warning - bar_end - 10);
  EXPECT_EQ(between.find_first_not_of(" \r"), std::string::npos) << "'" << between << "' in " << text;
  EXPECT_EQ(between.front(), '\r');
  EXPECT_EQ(between.back(), '\r');
  // The bar again after each line, and not in the middle of the one written in two parts.
  EXPECT_NE(text.find("its pace\nepoch 1/1 ["), std::string::npos) << text;
  EXPECT_NE(text.find("a log line in two parts, then its end\nepoch 1/1 ["), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressObserver, StoppedRunClosesAnOpenBar) {
  std::ostringstream out;
  auto progress = make_progress_observer(out, "bar");
  progress->on_run_start({1, 100, 0, 100});
  run_steps(*progress, 1, 1, 100);  // the first step draws
  progress->on_run_end({1, 0, true});
  const std::string text = out.str();
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

TEST(ProgressObserver, UnknownModeIsAConfigError) {
  std::ostringstream out;
  EXPECT_THROW(make_progress_observer(out, "fancy"), ConfigError);
}

TEST(SlowRankWarning, NamesTheSlowRank) {
  std::ostringstream out;
  auto warning = make_slow_rank_warning(out);
  IntervalFigures f = figures(50, 0);
  f.rank_step_ms = {10.0, 10.0, 30.0};
  warning->on_interval(f);
  EXPECT_EQ(out.str(), "warning: rank 2's step time 30.0 ms is 3.0x the median 10.0 ms; the job runs at its pace\n");
}

TEST(SlowRankWarning, QuietWhenRanksAreClose) {
  std::ostringstream out;
  auto warning = make_slow_rank_warning(out);
  IntervalFigures f = figures(50, 0);
  f.rank_step_ms = {10.0, 14.0};  // under 1.5x the median
  warning->on_interval(f);
  f.rank_step_ms = {0.2, 0.9};  // 4.5x, but under a millisecond apart
  warning->on_interval(f);
  f.rank_step_ms = {100.0};  // one rank
  warning->on_interval(f);
  EXPECT_EQ(out.str(), "");
}

TEST(TensorBoardObserver, WritesOneEventFile) {
  TempDir dir;
  {
    auto tensorboard = make_tensorboard_observer(dir.path().string());
    tensorboard->on_interval(figures(5, 0));
  }
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename().string().rfind("events.out.tfevents.", 0), 0u);
    // The file version record, then 4 scalars and one step time per rank, each a framed Event.
    EXPECT_GT(fs::file_size(entry.path()), 6u * 16u);
  }
  EXPECT_EQ(files, 1);
}
