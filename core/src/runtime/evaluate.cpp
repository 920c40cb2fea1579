#include "runtime/evaluate.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include <cmath>
#include "checkpoint/checkpoint.hpp"

#include "base/atomic_file.hpp"
#include "datasets/data_files.hpp"
#include "datasets/token_reader.hpp"
#include "datasets/tokenizer.hpp"
#include "io/npy.hpp"
#include "loader/plugin_loader.hpp"
#include "runtime/trainer.hpp"

namespace mgt {

void check_eval_data(const Model& model, const std::string& data_path, const std::string& x_name,
                     const std::string& y_name, int64_t batch, bool tokens_read_next) {
  const int64_t context = model.sequence_length();
  const data::DatasetInfo info = data::open_data_info(data_path, x_name, y_name, context, "");
  Shape input = {batch};
  input.insert(input.end(), info.sample_shape.begin(), info.sample_shape.end());
  Shape logits;
  try {
    logits = model.output_shape(input);
  } catch (const Error& e) {
    throw DataError("data file '" + data_path + "': the model cannot take its samples of shape " +
                    shape_string(info.sample_shape) + ": " + e.what());
  }
  if (context > 0) {
    if (logits.size() != 3 || logits[1] != context || logits[2] < info.num_classes)
      throw DataError("token file '" + data_path + "' has a vocabulary of " + std::to_string(info.num_classes) +
                      ", but the model gives logits of shape " + shape_string(logits) + " for input " +
                      shape_string(input) + ", expected [" + std::to_string(batch) + ", " + std::to_string(context) +
                      ", " + std::to_string(info.num_classes) + "]");
    // Checksums, and every token in the vocabulary, a chunk at a time: the reader holds a window.
    if (!tokens_read_next) {
      data::TokenCorpus checked(data_path);
      checked.open(/*in_memory=*/false);
    }
    return;
  }
  if (logits.size() != 2 || logits[1] < info.num_classes)
    throw DataError("data file '" + data_path + "' has " + std::to_string(info.num_classes) +
                    " classes, but the model gives logits of shape " + shape_string(logits) + " for input " +
                    shape_string(input) + ", expected [" + std::to_string(batch) + ", " +
                    std::to_string(info.num_classes) + "]");
  // Throws naming the file and row of a label outside [0, num_classes).
  for (const std::string& path : data::expand_data_files(data_path))
    data::class_counts(data::open_dataset_info(path, x_name, y_name));
}

int64_t default_eval_batch(const Model& model) {
  const int64_t context = model.sequence_length();
  return context > 0 ? std::max<int64_t>(1, kEvalBatchTokens / context) : kEvalSampleBatch;
}

data::MlmMasking model_masking(const Config& config, const Model& model, uint64_t seed) {
  data::MlmMasking masking;
  const int64_t context = model.sequence_length();
  if (context <= 0 || !config.has("model.objective") || config.get_string("model.objective") != "mlm") return masking;
  const int64_t vocab = model.output_shape({1, context}).back() - 1;
  masking.mask_token = vocab;
  masking.vocab = vocab;
  masking.seed = seed;
  return masking;
}

data::MlmMasking eval_masking(const Config& config, const Model& model) {
  data::MlmMasking masking = model_masking(config, model, kEvalMaskSeed);
  masking.same_every_epoch = true;
  return masking;
}

EvalResult evaluate_model(Model& model, const std::string& data_path, const std::string& x_name,
                          const std::string& y_name, int64_t batch, std::vector<float>* logits,
                          const data::MlmMasking& masking) {
  // A batch beyond the file's rows would only size buffers for rows that are not there.
  batch = std::min(
      batch,
      std::max<int64_t>(1, data::open_data_info(data_path, x_name, y_name, model.sequence_length(), "").num_samples));
  // The reader evaluate_share opens checks a token file's contents before its first window.
  check_eval_data(model, data_path, x_name, y_name, batch, /*tokens_read_next=*/true);
  EvalResult result = eval_result(evaluate_share(model, data_path, x_name, y_name, batch, 0, 1, logits, masking));
  result.masked = masking.enabled();
  return result;
}

EvalSums evaluate_share(Model& model, const std::string& data_path, const std::string& x_name,
                        const std::string& y_name, int64_t batch, int rank, int world, std::vector<float>* logits_out,
                        const data::MlmMasking& masking) {
  data::ReaderOptions ro;
  ro.path = data_path;
  ro.x_name = x_name;
  ro.y_name = y_name;
  ro.global_batch = batch * world;
  ro.rank = rank;
  ro.world = world;
  ro.shuffle = false;
  ro.drop_last = false;
  ro.context = model.sequence_length();
  ro.mlm = masking;
  const std::unique_ptr<data::BatchReader> opened = data::open_batch_reader(ro);
  data::BatchReader& reader = *opened;
  reader.start(0, 0);
  const int64_t labels_per_sample = reader.info().labels_per_sample;
  // The labels that count: a masked language model's masked tokens alone (the rest are ignored).
  const int64_t counted = masking.enabled() ? data::positions_per_window(ro.context) : labels_per_sample;

  Shape input = {batch};
  for (int64_t d : reader.info().sample_shape) input.push_back(d);
  Tensor grad(model.output_shape(input));
  EvalSums sums;
  int64_t correct = 0;
  StepContext ctx;
  ctx.training = false;
  for (int64_t b = 0; b < reader.batches_per_epoch(); ++b) {
    data::Batch next = reader.next();
    if (next.rows == 0) continue;  // the last global batch can leave a rank nothing
    const Tensor& out = model.forward(next.x, ctx);
    // A language model's logits [rows, T, vocab]: one row of logits per token.
    const Tensor logits =
        Tensor::view(const_cast<float*>(out.data()), {out.dim(0) * labels_per_sample, out.shape().back()});
    grad.resize(logits.shape());
    sums.loss_sum += softmax_cross_entropy(logits, next.y, grad, 1.0f);
    correct += count_correct(logits, next.y);
    if (logits_out) logits_out->insert(logits_out->end(), logits.data(), logits.data() + logits.numel());
    sums.samples += static_cast<double>(next.rows);
    if (reader.info().token_windows()) sums.tokens += static_cast<double>(next.rows * counted);
  }
  sums.correct = static_cast<double>(correct);
  return sums;
}

EvalResult eval_result(const EvalSums& total) {
  EvalResult result;
  result.samples = static_cast<int64_t>(total.samples);
  result.tokens = static_cast<int64_t>(total.tokens);
  const double n = std::max(total.tokens > 0 ? total.tokens : total.samples, 1.0);
  result.loss = total.loss_sum / n;
  result.accuracy = total.correct / n;
  return result;
}

const char* bits_unit(const std::string& spec) {
  if (spec.empty()) return "byte";
  const std::string path = data::expand_data_files(spec).front();  // shards agree on their tokenizer
  return data::is_token_file(path) && data::open_token_info(path).tokenizer != "bytes" ? "token" : "byte";
}

std::string test_line(const EvalResult& result, const std::string& path) {
  char line[320];
  if (result.tokens > 0 && result.masked)
    std::snprintf(line, sizeof line,
                  "test masked-token loss %.4f nats/token (perplexity %.3f), masked-token accuracy %.4f on %lld "
                  "masked tokens of %s\n",
                  result.loss, std::exp(result.loss), result.accuracy, static_cast<long long>(result.tokens),
                  path.c_str());
  else if (result.tokens > 0)
    std::snprintf(line, sizeof line,
                  "test loss %.4f nats/token (perplexity %.3f, %.4f bits per %s), token accuracy %.4f on %lld "
                  "tokens of %s\n",
                  result.loss, std::exp(result.loss), result.loss / std::log(2.0), bits_unit(path), result.accuracy,
                  static_cast<long long>(result.tokens), path.c_str());
  else
    std::snprintf(line, sizeof line, "test accuracy %.4f, loss %.4f on %lld samples of %s\n", result.accuracy,
                  result.loss, static_cast<long long>(result.samples), path.c_str());
  return line;
}

CheckpointModel::CheckpointModel(const std::string& checkpoint, CheckpointMeta meta,
                                 const std::vector<std::string>& plugin_paths)
    : stored(std::move(meta)),
      config(Config::from_string(stored.config_ini, checkpoint + " (stored config)")),
      registry(plugin_paths) {
  registry.add_recorded_paths(stored.plugin_paths, "the checkpoint's run");
  model = build_model(registry, config, store);
  load_checkpoint(checkpoint, store, nullptr);
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               const std::vector<std::string>& plugin_paths, int64_t batch,
                               const std::string& logits_path) {
  std::optional<AtomicFile> logits_file;
  if (!logits_path.empty()) logits_file.emplace(logits_path, "logits file");
  CheckpointModel loaded(checkpoint, plugin_paths);
  if (batch <= 0) batch = default_eval_batch(*loaded.model);
  if (const std::string first = data::expand_data_files(data_path).front();
      loaded.model->sequence_length() > 0 && data::is_token_file(first)) {
    const std::string& model = loaded.stored.tokenizer_model;
    data::require_tokenizer(data::open_token_info(first), "eval: ", model.empty() ? "bytes" : data::kSentencePiece,
                            model.empty() ? "" : data::tokenizer_sha256(model), "checkpoint '" + checkpoint + "'");
  }
  std::vector<float> logits;
  const EvalResult result = evaluate_model(*loaded.model, data_path, loaded.config.get_string("data.x_name"),
                                           loaded.config.get_string("data.y_name"), batch,
                                           logits_file ? &logits : nullptr, eval_masking(loaded.config, *loaded.model));
  if (logits_file) {
    const int64_t rows = result.samples, total = static_cast<int64_t>(logits.size());
    // A language model's windows keep their tokens apart: [N, T, vocab], as the model gives them.
    const Shape shape = result.tokens > 0 ? Shape{rows, loaded.model->sequence_length(),
                                                  total / (rows * loaded.model->sequence_length())}
                                          : Shape{rows, total / rows};
    logits_file->commit(npy_float32(logits.data(), shape));
  }
  return result;
}

}  // namespace mgt
