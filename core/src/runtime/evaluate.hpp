#pragma once
// Evaluation: accuracy and mean loss of a model over every sample of a data file, in order.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "datasets/mlm_masks.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

// Loss and accuracy are means per label: per sample for a sample file, per token (the loss in
// nats) for a language model on a token file.
struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  int64_t samples = 0;
  int64_t tokens = 0;   // labels of a token file's windows; 0 for a sample file
  bool masked = false;  // a masked language model's: the figures are over the masked tokens alone
};

// The result as one line, "test accuracy A, loss L on N samples of F" or, for tokens, "test loss
// L nats/token (perplexity P, B bits per byte), token accuracy A on N tokens of F".
std::string test_line(const EvalResult& result, const std::string& path);

// What a token of the file at `path` is, for the bits per unit: "byte" for byte tokens, "token"
// for a tokenizer's (a subword's bits are not a byte's).
const char* bits_unit(const std::string& path);

// Checks, before any sample is read, that `model` takes the data file's samples in batches of
// `batch` with an output for each of its classes, and that every label is one of those classes
// (reads all of y: cheap next to an evaluation). A token file's checksums and tokens are read
// too, a chunk at a time, unless a reader opens the file next (`tokens_read_next`), which checks
// them itself. Throws DataError naming the file.
void check_eval_data(const Model& model, const std::string& data_path, const std::string& x_name,
                     const std::string& y_name, int64_t batch, bool tokens_read_next = false);

// The model's parameters must be loaded; the data file is checked first (check_eval_data). With
// `logits`, every row's logits are appended to it, in the file's order.
// `masking` (eval_masking): a masked language model's inputs, its figures over the masked tokens.
EvalResult evaluate_model(Model& model, const std::string& data_path, const std::string& x_name,
                          const std::string& y_name, int64_t batch, std::vector<float>* logits = nullptr,
                          const data::MlmMasking& masking = {});

// One rank's share of an evaluation over `world` ranks: the rows a ShardedReader gives rank
// `rank` in global batches of batch x world (every sample once over the ranks), in batches of at
// most `batch`. Sums, for the ranks to add up; the data file is checked first by the caller.
struct EvalSums {
  double loss_sum = 0;
  double correct = 0;
  double samples = 0;
  double tokens = 0;  // a language model's labels; 0 for a sample file
};
EvalSums evaluate_share(Model& model, const std::string& data_path, const std::string& x_name,
                        const std::string& y_name, int64_t batch, int rank, int world,
                        std::vector<float>* logits = nullptr, const data::MlmMasking& masking = {});
// What a model asks of its token files' reader (its section's `objective`, model.objective =
// mlm: a masked language model, whose vocabulary's last id is the mask token), drawn from `seed`;
// no masking otherwise. eval_masking: evaluation's, the same masks at every evaluation, from a
// seed of their own so a run's test figures and `mgtrain eval`'s agree.
data::MlmMasking model_masking(const Config& config, const Model& model, uint64_t seed);
data::MlmMasking eval_masking(const Config& config, const Model& model);
inline constexpr uint64_t kEvalMaskSeed = 0x6d61736b;

// The mean figures of sums added over the ranks.
EvalResult eval_result(const EvalSums& total);

// A checkpoint's model as its run built it, from the config and plugins stored in the checkpoint
// (no config file needed; found by name in the search path, `plugin_paths` first), with the checkpoint's parameters and
// buffers loaded. The registry outlives the model its library made (members go in reverse order).
struct CheckpointModel {
  CheckpointModel(const std::string& checkpoint, const std::vector<std::string>& plugin_paths)
      : CheckpointModel(checkpoint, read_checkpoint_meta(checkpoint), plugin_paths) {}

  CheckpointMeta stored;
  Config config;
  PluginRegistry registry;
  ParameterStore store;
  std::unique_ptr<Model> model;

 private:
  CheckpointModel(const std::string& checkpoint, CheckpointMeta meta, const std::vector<std::string>& plugin_paths);
};

// `mgtrain eval`'s batch when none is given: 1000 samples of a sample file; for a language model,
// whose activations are per token (logits over the vocabulary, attention over the context), as
// many windows as hold kEvalBatchTokens tokens, at least one: the example's gpt (context 128) takes
// 32 windows, about 290 MB, where 1000 took 7.8 GB.
inline constexpr int64_t kEvalSampleBatch = 1000;
inline constexpr int64_t kEvalBatchTokens = 4096;
int64_t default_eval_batch(const Model& model);

// Rebuilds the model from the config stored in the checkpoint (CheckpointModel); `batch` 0 takes
// default_eval_batch. A
// non-empty `logits_path` gets every row's logits as a .npy file (float32 [N, classes], a language
// model's [N, T, vocab] for its windows; the file's row order), written whole or not at all; a path
// that cannot be written is refused first.
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               const std::vector<std::string>& plugin_paths, int64_t batch,
                               const std::string& logits_path = "");

}  // namespace mgt
