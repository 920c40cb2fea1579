// The runtime's results as the JSON lines `mgtrain train --json` and `mgtrain eval --json` print.
#include "runtime/result_json.hpp"

#include <cmath>

#include "io/json_line.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/trainer.hpp"

namespace mgt {

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
