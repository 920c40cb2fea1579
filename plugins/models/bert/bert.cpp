// Model plugin `bert`: a bidirectional transformer encoder trained as a masked language model
// (BERT's pre-training). Token and position embedding, then per layer self-attention without a
// causal mask and a GELU MLP of 4 x dim, each a residual branch, normalised after the residual
// sum (model.norm = post, BERT's) or before the branch (pre); then the MLM head: a dense layer,
// GELU, layer norm and logits through the token embedding's table. The vocabulary is model.vocab
// tokens plus one, the mask token, whose id is model.vocab: the window reader masks BERT's way
// (datasets/mlm_masks.hpp) because this model declares model.objective = mlm.
#include <string>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.layers", mgt::KeyType::positive_integer, "4", "transformer blocks"},
    {"model.heads", mgt::KeyType::positive_integer, "4", "attention heads; must divide model.dim"},
    {"model.dim", mgt::KeyType::positive_integer, "128", "width of the residual stream (embedding size)"},
    {"model.context", mgt::KeyType::positive_integer, "128", "tokens a window holds (at most model.positions)"},
    {"model.positions", mgt::KeyType::non_negative_integer, "0",
     "rows of the position table, the longest window the model takes; 0: model.context"},
    {"model.vocab", mgt::KeyType::positive_integer, "256",
     "token vocabulary: at least the token file's vocab_size (256 for byte tokens); the model adds one id, "
     "model.vocab itself, for the mask token"},
    {"model.norm", mgt::KeyType::choice, "post",
     "layer norm after each residual sum (post: BERT's) or before each branch, with a final one (pre)", "post|pre"},
    {"model.dropout", mgt::KeyType::non_negative_real, "0",
     "dropout probability after the embedding and at the end of each residual branch"},
    {"model.objective", mgt::KeyType::choice, "mlm",
     "the training objective: mlm, BERT's masked language model (15% of each window's tokens predicted: 80% "
     "shown as the mask token, 10% as a random token, 10% as they are)",
     "mlm"},
};

class Bert final : public mgt::SequentialModel {
 public:
  explicit Bert(const mgt::ConfigSection& config) {
    const int64_t layers = config.get_size("layers", 1024);
    const int64_t heads = config.get_size("heads", mgt::kMaxModelSize);
    const int64_t dim = config.get_size("dim", mgt::kMaxModelSize);
    context_ = config.get_size("context", mgt::kMaxModelSize);
    int64_t positions = config.get_int("positions");
    if (positions == 0) positions = context_;
    const int64_t vocab = config.get_size("vocab", mgt::kMaxModelSize - 1);
    const bool pre = config.get_string("norm") == "pre";
    const double dropout = config.get_real("dropout");
    if (dropout >= 1.0)
      throw mgt::ConfigError("config key 'model.dropout': expected a probability in [0, 1), got " +
                             std::to_string(dropout));
    if (dim % heads != 0)
      throw mgt::ConfigError("config key 'model.heads' = " + std::to_string(heads) + " does not divide model.dim = " +
                             std::to_string(dim) + ": expected a divisor of it (a head's width is dim / heads)");
    if (context_ > positions)
      throw mgt::ConfigError("config key 'model.context' = " + std::to_string(context_) +
                             " exceeds the position table of model.positions = " + std::to_string(positions) +
                             " rows: expected a context of at most " + std::to_string(positions));
    const auto drop = [&](const std::string& name) -> std::unique_ptr<mgt::Layer> {
      return dropout > 0 ? mgt::make_dropout(name, static_cast<float>(dropout)) : nullptr;
    };
    const auto push = [](std::vector<std::unique_ptr<mgt::Layer>>& list, std::unique_ptr<mgt::Layer> layer) {
      if (layer) list.push_back(std::move(layer));
    };
    add(mgt::make_token_embedding("embed", vocab + 1, positions, dim, /*table_shared=*/true));
    if (!pre) add(mgt::make_layer_norm("embed_ln", dim));
    if (auto d = drop("drop")) add(std::move(d));
    for (int64_t i = 0; i < layers; ++i) {
      const std::string h = "h" + std::to_string(i);
      std::vector<std::unique_ptr<mgt::Layer>> attention;
      if (pre) attention.push_back(mgt::make_layer_norm(h + ".ln1", dim));
      attention.push_back(mgt::make_token_linear(h + ".attn.qkv", dim, 3 * dim));
      attention.push_back(mgt::make_attention(h + ".attn", dim, heads, /*causal=*/false));
      attention.push_back(mgt::make_token_linear(h + ".attn.proj", dim, dim));
      push(attention, drop(h + ".attn_drop"));
      add(mgt::make_residual(h + ".attn_block", std::move(attention)));
      if (!pre) add(mgt::make_layer_norm(h + ".ln1", dim));
      std::vector<std::unique_ptr<mgt::Layer>> mlp;
      if (pre) mlp.push_back(mgt::make_layer_norm(h + ".ln2", dim));
      mlp.push_back(mgt::make_token_linear(h + ".mlp.fc", dim, 4 * dim));
      mlp.push_back(mgt::make_gelu(h + ".mlp.gelu"));
      mlp.push_back(mgt::make_token_linear(h + ".mlp.proj", 4 * dim, dim));
      push(mlp, drop(h + ".mlp_drop"));
      add(mgt::make_residual(h + ".mlp_block", std::move(mlp)));
      if (!pre) add(mgt::make_layer_norm(h + ".ln2", dim));
    }
    if (pre) add(mgt::make_layer_norm("ln_f", dim));
    // BERT's MLM head: a transform of each token, then the tied decoder.
    add(mgt::make_token_linear("mlm.dense", dim, dim));
    add(mgt::make_gelu("mlm.gelu"));
    add(mgt::make_layer_norm("mlm.ln", dim));
    add(mgt::make_tied_head("head", "embed", vocab + 1, dim));
  }

  int64_t sequence_length() const override { return context_; }

 private:
  int64_t context_ = 0;
};

}  // namespace

MGT_MODEL_PLUGIN("bert", "1.0.0",
                 "bidirectional transformer encoder (BERT) trained as a masked language model: embedding, "
                 "(self-attention, GELU MLP) x layers, post- or pre-norm, MLM head tied to the embedding",
                 kKeys, Bert)
