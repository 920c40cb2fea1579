#include "datasets/token_reader.hpp"

#include <algorithm>
#include <chrono>

#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"

namespace mgt::data {

int64_t window_offset(uint64_t seed, int64_t epoch, int64_t sample, int64_t tokens, int64_t context) {
  static const uint64_t purpose = rng::purpose_hash("data.windows");
  const auto r = rng::philox(rng::make_key(seed, purpose), static_cast<uint64_t>(epoch), static_cast<uint64_t>(sample));
  const uint64_t draw = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  return static_cast<int64_t>(draw % static_cast<uint64_t>(tokens - context));
}

namespace {

// A data file of the wrong kind for the model, refused by name.
void check_kind(const std::string& spec, int64_t context, const std::string& model_name) {
  const std::vector<std::string> files = expand_data_files(spec);
  const std::string& path = files.front();
  const bool tokens = is_token_file(path);
  for (const std::string& other : files)
    if (is_token_file(other) != tokens) {
      require_openable(other);
      throw DataError("data files '" + (tokens ? path : other) + "' and '" + (tokens ? other : path) +
                      "' (shards of '" + spec +
                      "') differ: the first is a token file (/tokens), the second a sample file (/x, /y); expected "
                      "the shards of one data set to agree");
    }
  const std::string model = model_name.empty() ? "the model" : "model '" + model_name + "'";
  if (tokens && context == 0)
    throw DataError("data file '" + path + "' is a token file (/tokens), but " + model +
                    " reads sample files (/x, /y): train a language model on it (model.name = gpt, or layers "
                    "whose model.layers starts with embed V D)");
  if (!tokens && context > 0) {
    require_openable(path);  // a file that cannot be read at all is said to be what it is
    throw DataError("data file '" + path + "' is not a token file (no dataset /tokens), but " + model +
                    " reads token files: write one with `mgtrain data convert --text FILE... --out OUT.h5`");
  }
}

// The keys that set a language model's window and vocabulary: the gpt model's, or for a model
// declared as a list (model.name = layers) its input shape and its embed entry.
std::string context_key(const std::string& model_name) {
  return model_name == "layers" ? "model.input_shape" : "model.context";
}
std::string vocab_key(const std::string& model_name) {
  return model_name == "layers" ? "the V of model.layers' embed V D" : "model.vocab";
}

DatasetInfo windows_info(const TokenFileInfo& file, int64_t context) {
  DatasetInfo info;
  info.path = file.path;
  info.x_name = "tokens";
  info.sample_shape = {context};
  info.num_samples = (file.tokens - 1) / context;
  info.x_type = "uint" + std::to_string(8 * file.token_bytes);
  info.y_type = info.x_type;
  info.num_classes = file.vocab_size;
  info.labels_per_sample = context;
  info.tokens = file.tokens;
  return info;
}

}  // namespace

std::unique_ptr<BatchReader> open_batch_reader(const ReaderOptions& options) {
  check_kind(options.path, options.context, options.model_name);
  if (options.context > 0) return std::make_unique<TokenReader>(options);
  return std::make_unique<ShardedReader>(options);
}

DatasetInfo open_data_info(const std::string& path, const std::string& x_name, const std::string& y_name,
                           int64_t context, const std::string& model_name) {
  check_kind(path, context, model_name);
  if (context == 0) return open_sample_set_info(path, x_name, y_name);
  const TokenFileInfo file = TokenCorpus(path).info();
  if (file.tokens < context + 1)
    throw DataError("token file '" + path + "' holds " + std::to_string(file.tokens) +
                    " tokens, fewer than one window of " + context_key(model_name) +
                    " + 1 = " + std::to_string(context + 1));
  return windows_info(file, context);
}

TokenReader::TokenReader(const ReaderOptions& options) : options_(options) {
  MGT_CHECK(options.context > 0, ConfigError,
            "token file '" + options.path + "': the model reads windows of " + std::to_string(options.context) +
                " tokens, expected at least 1");
  MGT_CHECK(options.world > 0 && options.global_batch > 0 && options.global_batch % options.world == 0, ConfigError,
            "train.global_batch = " + std::to_string(options.global_batch) + " is not divisible by the " +
                std::to_string(options.world) + " training ranks");
  corpus_ = std::make_unique<TokenCorpus>(options.path);
  const TokenFileInfo& file = corpus_->info();
  if (options.vocab_limit > 0 && file.vocab_size > options.vocab_limit)
    throw DataError("token file '" + options.path + "' has vocab_size " + std::to_string(file.vocab_size) +
                    ", more than the model's vocabulary of " + std::to_string(options.vocab_limit) + " (" +
                    vocab_key(options.model_name) + "): expected a model vocabulary of at least " +
                    std::to_string(file.vocab_size));
  if (file.tokens < options.context + 1)
    throw DataError("token file '" + options.path + "' holds " + std::to_string(file.tokens) +
                    " tokens, fewer than one window of " + context_key(options.model_name) +
                    " + 1 = " + std::to_string(options.context + 1));
  corpus_->open(options.in_memory);
  window_.resize(static_cast<size_t>(options.context + 1));
  if (options.mlm.enabled()) mask_order_.resize(static_cast<size_t>(options.context));
  info_ = windows_info(file, options.context);
  local_ = options.global_batch / options.world;
  if (options.drop_last && info_.num_samples < options.global_batch)
    throw DataError("token file '" + options.path + "' gives " + std::to_string(info_.num_samples) + " windows of " +
                    std::to_string(options.context) + " tokens, fewer than one global batch of " +
                    std::to_string(options.global_batch));
  batches_per_epoch_ = options.drop_last ? info_.num_samples / options.global_batch
                                         : (info_.num_samples + options.global_batch - 1) / options.global_batch;
  for (int s = 0; s < 2; ++s) {
    x_[s] = Tensor({local_, options.context});
    y_[s].resize(static_cast<size_t>(local_ * options.context));
  }
}

TokenReader::~TokenReader() = default;

void TokenReader::start(int64_t epoch, int64_t batch_in_epoch) {
  epoch_ = epoch + batch_in_epoch / batches_per_epoch_;
  batch_ = batch_in_epoch % batches_per_epoch_;
}

Batch TokenReader::next() {
  const auto began = std::chrono::steady_clock::now();
  const int64_t T = options_.context, B = options_.global_batch;
  const int64_t first = batch_ * B + options_.rank * local_;
  // Without drop_last the last global batch is short: a rank takes what is left of its slice.
  const int64_t rows = std::clamp<int64_t>(info_.num_samples - first, 0, local_);
  slot_ ^= 1;
  Tensor& x = x_[slot_];
  std::vector<int32_t>& y = y_[slot_];
  x.resize({rows, T});
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t sample = first + i;
    const int64_t offset =
        options_.shuffle ? window_offset(options_.seed, epoch_, sample, info_.tokens, T) : sample * T;
    corpus_->read(offset, T + 1, window_.data());
    const uint32_t* window = window_.data();
    float* xi = x.data() + i * T;
    int32_t* yi = y.data() + i * T;
    for (int64_t t = 0; t < T; ++t) {
      xi[t] = static_cast<float>(window[t]);
      yi[t] = static_cast<int32_t>(window[t + 1]);
    }
    if (options_.mlm.enabled()) mask_window(options_.mlm, epoch_, sample, xi, yi, T, mask_order_.data());
  }
  // After the reads: a file cut before any of them gave zeros, named here rather than trained on.
  corpus_->check_size(epoch_, batch_);
  Batch batch;
  batch.x = Tensor::view(x.data(), {rows, T});
  batch.y = y.data();
  batch.rows = rows;
  batch.epoch = epoch_;
  batch.batch_in_epoch = batch_;
  batch.first_sample = options_.rank * local_;
  batch.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (++batch_ == batches_per_epoch_) {
    batch_ = 0;
    ++epoch_;
  }
  return batch;
}

}  // namespace mgt::data
