#pragma once
// Subword tokenizers for language models: a SentencePiece model (BPE or unigram), kept as its
// serialized bytes so that a token file and a checkpoint can carry the very model that made their
// ids. SentencePiece itself runs in libmgtrain-sentencepiece.so (datasets/sentencepiece/bridge.hpp
// says why), loaded on first use.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mgt::data {

inline constexpr const char* kSentencePiece = "sentencepiece";

class Tokenizer {
 public:
  // Parses a serialized model; `origin` names where it came from ("tokenizer file 'F'"). Throws
  // DataError "<origin> is not a SentencePiece model (...)" for anything else.
  Tokenizer(std::string bytes, const std::string& origin);
  // Reads the model file at `path`: DataError naming it when missing, unreadable or not a model.
  static Tokenizer from_file(const std::string& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  int64_t vocab_size() const { return vocab_size_; }
  const std::string& bytes() const { return bytes_; }
  const std::string& sha256() const { return sha256_; }
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  std::string bytes_, sha256_, origin_;
  int64_t vocab_size_ = 0;
  void* model_ = nullptr;
};

// The SHA-256 of a tokenizer's serialized bytes, hex.
std::string tokenizer_sha256(const std::string& bytes);

struct TokenizerTraining {
  std::vector<std::string> files;
  int64_t vocab = 0;
  std::string type = "bpe";  // bpe or unigram
};

// Trains a SentencePiece model on the text files and returns its serialized bytes. Throws
// ConfigError for a vocabulary outside the range or one the text cannot fill, DataError for a
// text file that is missing, unreadable or empty.
std::string train_tokenizer(const TokenizerTraining& options);

// The vocabulary sizes train_tokenizer accepts: the byte pieces, <unk> and the newline below,
// ids exact in float32 (the model reads them so) above.
inline constexpr int64_t kMinTokenizerVocab = 258;
inline constexpr int64_t kMaxTokenizerVocab = int64_t{1} << 24;

}  // namespace mgt::data
