// The metrics file: one JSON line per logging interval and per evaluation of the test file, what `mgtrain report` draws
// and scripts read with sed.
#include <filesystem>
#include <iostream>

#include "io/append_file.hpp"
#include "io/console.hpp"
#include "io/json_line.hpp"
#include "mgtrain/error.hpp"
#include "observers/observer.hpp"

namespace mgt {

namespace {

std::string with_parent_directory(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  return path;  // a directory that could not be made shows as the open's own reason
}

// Appends each interval's figures to the file, one write per line, so a run that dies keeps its
// lines. A line that cannot be written (a full disk) is taken back whole, the run is told once on
// stderr, and the metrics stay off for the rest of the run: training matters more than its log.
class MetricsFile final : public TrainingCallback {
 public:
  explicit MetricsFile(const std::string& path) : out_(with_parent_directory(path), "metrics file") {}

  // Figures to 9 significant digits; a NaN loss (a skipped step's) is null.
  void on_interval(const IntervalFigures& f) override {
    JsonValue record;
    record["step"] = f.step;
    record["epoch"] = f.epoch + 1;
    record["loss"] = json_significant(f.loss, 9);
    record["accuracy"] = json_significant(f.accuracy, 9);
    record["samples_per_s"] = json_significant(f.samples_per_s, 9);
    if (f.tokens_per_s > 0) record["tokens_per_s"] = json_significant(f.tokens_per_s, 9);
    record["data_wait_share"] = json_significant(f.data_wait_share, 9);
    record["lr"] = json_significant(f.learning_rate, 9);
    record["grad_norm"] = json_significant(f.grad_norm, 9);
    record["time_s"] = json_significant(f.time_s, 9);
    record["rss_mb"] = json_significant(f.rss_mb, 9);
    record["open_fds"] = f.open_fds;
    JsonValue& ms = record["rank_step_ms"] = JsonValue::array();
    for (double r : f.rank_step_ms) ms.push_back(json_significant(r, 9));
    if (!f.gpu.empty()) {
      JsonValue& samples = record["gpu"] = JsonValue::array();
      for (const GpuSample& g : f.gpu) samples.push_back(gpu_sample_json(g));
    }
    if (!off_) check(out_.append(json_line(record) + "\n"));
  }

  // An evaluation's own record, told from an interval's by its test_ fields.
  void on_evaluation(const EvalFigures& f) override {
    JsonValue record;
    record["step"] = f.step;
    record["epoch"] = f.epoch + 1;
    record["test_accuracy"] = json_significant(f.accuracy, 9);
    record["test_loss"] = json_significant(f.loss, 9);
    record["test_samples"] = f.samples;
    if (!off_) check(out_.append(json_line(record) + "\n"));
  }

  // A non-finite step's own records, one per rank whose own gradient held NaN or Inf ("nonfinite":
  // the rank; null when no rank's did or none looked), with what became of the step and where it
  // came from. Flat, so that `mgtrain report` reads the file as before (and leaves them out).
  void on_nonfinite(const NonFiniteFigures& f) override {
    std::vector<NonFiniteFigures::Origin> origins = f.ranks;
    if (origins.empty()) origins.push_back({-1, "", ""});
    for (const auto& origin : origins) {
      JsonValue record;
      record["step"] = f.step;
      record["nonfinite"] = origin.rank >= 0 ? JsonValue(origin.rank) : JsonValue();
      record["action"] = f.skipped ? "skip" : "abort";
      record["diagnosed"] = f.diagnosed;
      record["layer"] = origin.layer;
      record["parameter"] = origin.parameter;
      if (!off_) check(out_.append(json_line(record) + "\n"));
    }
  }

  void on_run_end(const RunEnd&) override {
    if (!off_) check(out_.close());
  }

 private:
  void check(const std::string& failure) {
    if (failure.empty()) return;
    off_ = true;
    console::warning("mgtrain: warning: metrics file '" + printable(out_.path()) + "' cannot be written: " + failure +
                     "; metrics are off for the rest of the run\n");
  }

  AppendFile out_;
  bool off_ = false;
};

}  // namespace

std::unique_ptr<TrainingCallback> make_metrics_file(const std::string& path) {
  return std::make_unique<MetricsFile>(path);
}

}  // namespace mgt
