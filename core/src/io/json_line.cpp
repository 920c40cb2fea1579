#include "io/json_line.hpp"

#include <charconv>
#include <cmath>

#include "kernels/gpu_runtime.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench.hpp"

namespace mgt {

namespace {

// Rounds through the decimal text printf would print (locale-independent), then back to a double,
// which nlohmann/json prints as its shortest round-trip form: the same digits.
JsonValue rounded(double value, std::chars_format format, int precision) {
  if (!std::isfinite(value)) return nullptr;
  char text[512];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value, format, precision);
  double r = value;
  if (ec == std::errc()) std::from_chars(text, end, r);
  // JSON has one kind of number: a whole one prints without ".0", as printf printed it.
  if (std::fabs(r) < 0x1p53 && r == std::trunc(r)) return static_cast<int64_t>(r);
  return r;
}

}  // namespace

JsonValue json_significant(double value, int digits) { return rounded(value, std::chars_format::general, digits); }

JsonValue json_fixed(double value, int decimals) { return rounded(value, std::chars_format::fixed, decimals); }

std::string json_line(const JsonValue& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

JsonValue gpu_sample_json(const GpuSample& sample) {
  if (!sample.valid) return nullptr;
  JsonValue o;
  o["util"] = json_fixed(sample.util_percent, 1);
  o["mem_used_mb"] = json_fixed(sample.memory_used_mb, 1);
  o["mem_total_mb"] = json_fixed(sample.memory_total_mb, 1);
  o["temp_c"] = json_fixed(sample.temperature_c, 1);
  return o;
}

std::string train_result_json(const TrainResult& r, int world_size) {
  JsonValue o;
  o["steps"] = r.steps;
  o["steps_run"] = r.steps_run;
  o["samples"] = r.samples;
  o["train_seconds"] = json_fixed(r.train_seconds, 6);
  o["samples_per_s"] = json_fixed(r.samples_per_s, 3);
  if (r.tokens_per_s > 0) o["tokens_per_s"] = json_fixed(r.tokens_per_s, 3);
  o["final_loss"] = json_significant(r.final_loss, 9);
  o["checkpoint"] = r.checkpoint;
  o["world_size"] = world_size;
  o["peak_rss_mb"] = json_fixed(r.peak_rss_mb, 1);
  o["compute_ms"] = json_fixed(1e3 * r.phases.compute, 4);
  o["sync_ms"] = json_fixed(1e3 * r.phases.sync, 4);
  o["data_wait_ms"] = json_fixed(1e3 * r.phases.data_wait, 4);
  o["optimizer_ms"] = json_fixed(1e3 * r.phases.optimizer, 4);
  o["test_accuracy"] = json_fixed(r.test_accuracy, 6);
  if (r.test_loss >= 0) o["test_loss"] = json_significant(r.test_loss, 9);
  o["skipped_steps"] = r.skipped_steps;
  o["lost_ranks"] = r.lost_ranks;
  o["device"] = r.device;
  return json_line(o);
}

std::string bench_result_json(const BenchResult& b, int world_size, int64_t steps, int64_t repeats) {
  const StepPhases& p = b.run.phases;
  JsonValue runs = JsonValue::array();
  for (double s : b.scaling_runs) runs.push_back(json_fixed(s, 6));
  JsonValue o;
  o["world_size"] = world_size;
  o["steps"] = steps;
  o["samples_per_s"] = json_fixed(b.run.samples_per_s, 3);
  o["samples_per_s_np1"] = json_fixed(b.samples_per_s_np1, 3);
  o["scaling_efficiency"] = json_fixed(b.scaling_efficiency, 4);
  o["compute_ms"] = json_fixed(1e3 * p.compute, 4);
  o["sync_ms"] = json_fixed(1e3 * p.sync, 4);
  o["data_wait_ms"] = json_fixed(1e3 * p.data_wait, 4);
  o["optimizer_ms"] = json_fixed(1e3 * p.optimizer, 4);
  o["gradient_bytes"] = b.gradient_bytes;
  o["allreduce_ms"] = json_fixed(b.allreduce_ms, 4);
  o["mpi_allreduce_ms"] = json_fixed(b.mpi_allreduce_ms, 4);
  o["allreduce_busbw_gbs"] = json_fixed(b.allreduce_busbw_gbs, 4);
  o["mpi_busbw_gbs"] = json_fixed(b.mpi_busbw_gbs, 4);
  o["flat_busbw_gbs"] = json_fixed(b.flat_busbw_gbs, 4);
  o["hierarchical_busbw_gbs"] = json_fixed(b.hierarchical_busbw_gbs, 4);
  o["shared_memory_busbw_gbs"] = json_fixed(b.shared_memory_busbw_gbs, 4);
  o["peak_rss_mb"] = json_fixed(b.run.peak_rss_mb, 1);
  o["repeats"] = repeats;
  o["scaling_efficiency_runs"] = std::move(runs);
  o["device"] = b.run.device;
  return json_line(o);
}

std::string eval_result_json(const EvalResult& r) {
  JsonValue o;
  o["accuracy"] = json_fixed(r.accuracy, 6);
  o["loss"] = json_fixed(r.loss, 6);
  o["samples"] = r.samples;
  if (r.tokens > 0) {
    // A language model's loss is nats per token; perplexity and bits per token come from it.
    o["tokens"] = r.tokens;
    o["perplexity"] = json_fixed(std::exp(r.loss), 6);
    o["bits_per_token"] = json_fixed(r.loss / std::log(2.0), 6);
  }
  return json_line(o);
}

}  // namespace mgt
