// Model plugin `gpt`: a decoder-only transformer language model (the GPT-2 block). Token and
// position embedding, then per layer x + attention(layer_norm(x)) and x + MLP(layer_norm(x)) with a
// GELU MLP of 4 x dim, a final layer norm and the output head, tied to the token embedding by
// default. It reads token files (`mgtrain data convert --text`) in windows of model.context tokens
// and gives logits [rows, context, vocab].
#include <string>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.layers", mgt::KeyType::positive_integer, "4", "transformer blocks"},
    {"model.heads", mgt::KeyType::positive_integer, "4", "attention heads; must divide model.dim"},
    {"model.dim", mgt::KeyType::positive_integer, "128", "width of the residual stream (embedding size)"},
    {"model.context", mgt::KeyType::positive_integer, "128", "tokens a window holds (the longest sequence)"},
    {"model.vocab", mgt::KeyType::positive_integer, "256",
     "vocabulary size: at least the token file's vocab_size (256 for byte tokens)"},
    {"model.dropout", mgt::KeyType::non_negative_real, "0",
     "dropout probability after the embedding and at the end of each residual branch"},
    {"model.tie_weights", mgt::KeyType::boolean, "true",
     "the output head uses the token embedding's table (GPT-2); false: a head of its own"},
};

class Gpt final : public mgt::SequentialModel {
 public:
  explicit Gpt(const mgt::ConfigSection& config) {
    const int64_t layers = config.get_size("layers", 1024);
    const int64_t heads = config.get_size("heads", mgt::kMaxModelSize);
    const int64_t dim = config.get_size("dim", mgt::kMaxModelSize);
    context_ = config.get_size("context", mgt::kMaxModelSize);
    const int64_t vocab = config.get_size("vocab", mgt::kMaxModelSize);
    const double dropout = config.get_real("dropout");
    if (dropout >= 1.0)
      throw mgt::ConfigError("config key 'model.dropout': expected a probability in [0, 1), got " +
                             std::to_string(dropout));
    if (dim % heads != 0)
      throw mgt::ConfigError("config key 'model.heads' = " + std::to_string(heads) + " does not divide model.dim = " +
                             std::to_string(dim) + ": expected a divisor of it (a head's width is dim / heads)");
    const auto drop = [&](const std::string& name) -> std::unique_ptr<mgt::Layer> {
      return dropout > 0 ? mgt::make_dropout(name, static_cast<float>(dropout)) : nullptr;
    };
    const auto push = [](std::vector<std::unique_ptr<mgt::Layer>>& layers, std::unique_ptr<mgt::Layer> layer) {
      if (layer) layers.push_back(std::move(layer));
    };
    const bool tied = config.get_bool("tie_weights");
    add(mgt::make_token_embedding("wte", vocab, context_, dim, /*table_shared=*/tied));
    if (auto d = drop("drop")) add(std::move(d));
    for (int64_t i = 0; i < layers; ++i) {
      const std::string h = "h" + std::to_string(i);
      std::vector<std::unique_ptr<mgt::Layer>> attention;
      attention.push_back(mgt::make_layer_norm(h + ".ln1", dim));
      attention.push_back(mgt::make_token_linear(h + ".attn.qkv", dim, 3 * dim));
      attention.push_back(mgt::make_attention(h + ".attn", dim, heads, /*causal=*/true));
      attention.push_back(mgt::make_token_linear(h + ".attn.proj", dim, dim));
      push(attention, drop(h + ".attn_drop"));
      add(mgt::make_residual(h + ".attn_block", std::move(attention)));
      std::vector<std::unique_ptr<mgt::Layer>> mlp;
      mlp.push_back(mgt::make_layer_norm(h + ".ln2", dim));
      mlp.push_back(mgt::make_token_linear(h + ".mlp.fc", dim, 4 * dim));
      mlp.push_back(mgt::make_gelu(h + ".mlp.gelu"));
      mlp.push_back(mgt::make_token_linear(h + ".mlp.proj", 4 * dim, dim));
      push(mlp, drop(h + ".mlp_drop"));
      add(mgt::make_residual(h + ".mlp_block", std::move(mlp)));
    }
    add(mgt::make_layer_norm("ln_f", dim));
    if (tied)
      add(mgt::make_tied_head("head", "wte", vocab, dim));
    else
      add(mgt::make_token_linear("head", dim, vocab));
  }

  int64_t sequence_length() const override { return context_; }

 private:
  int64_t context_ = 0;
};

}  // namespace

MGT_MODEL_PLUGIN("gpt", "1.0.0",
                 "decoder-only transformer language model (GPT-2 block): embedding, (LayerNorm, causal "
                 "self-attention, LayerNorm, GELU MLP) x layers, LayerNorm, tied head",
                 kKeys, Gpt)
