#include "datasets/tokenizer.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/sha256.hpp"
#include "datasets/regular_file.hpp"
#include "datasets/sentencepiece/bridge.hpp"
#include "mgtrain/error.hpp"

namespace mgt::data {

namespace {

struct Bridge {
  mgt_spm_load_fn load = nullptr;
  mgt_spm_unload_fn unload = nullptr;
  mgt_spm_vocab_size_fn vocab_size = nullptr;
  mgt_spm_encode_fn encode = nullptr;
  mgt_spm_decode_fn decode = nullptr;
  mgt_spm_train_fn train = nullptr;
  mgt_spm_free_fn free = nullptr;
};

Bridge load_bridge() {
  // Beside the library this code is in (libmgtrain-runtime.so in lib/), or in ../lib from an
  // executable in bin/ that links it.
  Dl_info self{};
  std::filesystem::path here = dladdr(reinterpret_cast<void*>(&load_bridge), &self) && self.dli_fname
                                   ? std::filesystem::path(self.dli_fname).parent_path()
                                   : std::filesystem::path(".");
  // Where protobuf's runtime is already loaded (ONNX export), SentencePiece must bind to its own
  // copy first (bridge.hpp); sanitizers refuse RTLD_DEEPBIND, so it is used only then.
  int flags = RTLD_NOW | RTLD_LOCAL;
  if (dlsym(RTLD_DEFAULT, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc") != nullptr) flags |= RTLD_DEEPBIND;
  std::string tried, why;
  void* handle = nullptr;
  for (const auto& dir : {here, here.parent_path() / "lib"}) {
    const std::string path = (dir / "libmgtrain-sentencepiece.so").string();
    handle = dlopen(path.c_str(), flags);
    if (handle) break;
    const char* error = dlerror();
    tried += (tried.empty() ? "'" : ", '") + path + "'";
    why = error ? error : "unknown";
  }
  if (!handle)
    throw Error("the SentencePiece tokenizer library cannot be loaded (tried " + tried + "): " + why +
                "; expected libmgtrain-sentencepiece.so installed beside libmgtrain-runtime.so");
  Bridge b;
  const auto need = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn) throw Error(std::string("libmgtrain-sentencepiece.so lacks the symbol ") + name);
  };
  need(b.load, "mgt_spm_load");
  need(b.unload, "mgt_spm_unload");
  need(b.vocab_size, "mgt_spm_vocab_size");
  need(b.encode, "mgt_spm_encode");
  need(b.decode, "mgt_spm_decode");
  need(b.train, "mgt_spm_train");
  need(b.free, "mgt_spm_free");
  return b;  // loaded for the life of the process
}

const Bridge& bridge() {
  static const Bridge loaded = load_bridge();
  return loaded;
}

std::string take_error(char* error) {
  std::string text = error ? error : "unknown error";
  bridge().free(error);
  // SentencePiece's statuses start with a code and the source line ("Internal: src/x.cc(661)
  // [condition] "): the reason is what follows.
  if (const size_t close = text.find("] "); close != std::string::npos && text.find(".cc(") < close)
    text = text.substr(close + 2);
  return text;
}

}  // namespace

std::string tokenizer_sha256(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

Tokenizer::Tokenizer(std::string bytes, const std::string& origin)
    : bytes_(std::move(bytes)), sha256_(tokenizer_sha256(bytes_)), origin_(origin) {
  char* error = nullptr;
  if (bytes_.empty()) throw DataError(origin + " is empty, expected a SentencePiece model");
  if (bridge().load(bytes_.data(), bytes_.size(), &model_, &error) != 0)
    throw DataError(origin + " is not a SentencePiece model (" + take_error(error) +
                    "); expected one written by `mgtrain data tokenizer`");
  vocab_size_ = bridge().vocab_size(model_);
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  const std::string named = "tokenizer file '" + path + "'";
  struct stat info {};
  if (const std::string why = unreachable_path(path, &info); !why.empty()) throw DataError(named + " " + why);
  if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
    throw DataError(named + " is " + kind + ", expected a regular file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in && !in.eof()) throw DataError(named + " cannot be read: " + std::strerror(errno));
  return Tokenizer(bytes.str(), named);
}

Tokenizer::~Tokenizer() {
  if (model_) bridge().unload(model_);
}

Tokenizer::Tokenizer(Tokenizer&& other) noexcept
    : bytes_(std::move(other.bytes_)),
      sha256_(std::move(other.sha256_)),
      origin_(std::move(other.origin_)),
      vocab_size_(other.vocab_size_),
      model_(std::exchange(other.model_, nullptr)) {}

Tokenizer& Tokenizer::operator=(Tokenizer&& other) noexcept {
  if (this != &other) {
    if (model_) bridge().unload(model_);
    bytes_ = std::move(other.bytes_);
    sha256_ = std::move(other.sha256_);
    origin_ = std::move(other.origin_);
    vocab_size_ = other.vocab_size_;
    model_ = std::exchange(other.model_, nullptr);
  }
  return *this;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  int32_t* ids = nullptr;
  size_t count = 0;
  char* error = nullptr;
  if (bridge().encode(model_, text.data(), text.size(), &ids, &count, &error) != 0)
    throw DataError(origin_ + ": encoding failed: " + take_error(error));
  std::vector<int32_t> out(ids, ids + count);
  bridge().free(ids);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  char* text = nullptr;
  size_t size = 0;
  char* error = nullptr;
  if (bridge().decode(model_, ids.data(), ids.size(), &text, &size, &error) != 0)
    throw DataError(origin_ + ": decoding failed: " + take_error(error));
  std::string out(text, size);
  bridge().free(text);
  return out;
}

namespace {

// The lines of the text files in order, without their newline, for SentencePiece's trainer.
struct LineSource {
  std::vector<std::string> files;
  size_t next_file = 0;
  std::ifstream in;
  std::string line;
  int64_t bytes = 0;

  static int next(void* state, const char** text, size_t* size) {
    auto& self = *static_cast<LineSource*>(state);
    while (true) {
      if (self.in.is_open() && std::getline(self.in, self.line)) {
        self.bytes += static_cast<int64_t>(self.line.size()) + 1;
        if (self.line.empty()) continue;
        *text = self.line.data();
        *size = self.line.size();
        return 1;
      }
      if (self.next_file == self.files.size()) return 0;
      self.in = std::ifstream(self.files[self.next_file++], std::ios::binary);
    }
  }
};

}  // namespace

std::string train_tokenizer(const TokenizerTraining& options) {
  if (options.files.empty()) throw ConfigError("data tokenizer: give at least one text file (--text FILE...)");
  if (options.vocab < kMinTokenizerVocab || options.vocab > kMaxTokenizerVocab)
    throw ConfigError("data tokenizer: --vocab " + std::to_string(options.vocab) + " is out of range: expected " +
                      std::to_string(kMinTokenizerVocab) + " to " + std::to_string(kMaxTokenizerVocab) +
                      " (256 byte pieces, <unk> and the newline come first)");
  if (options.type != "bpe" && options.type != "unigram")
    throw ConfigError("data tokenizer: --type '" + options.type + "': expected bpe or unigram");
  for (const std::string& path : options.files) {
    struct stat info {};
    if (const std::string why = unreachable_path(path, &info); !why.empty())
      throw DataError("text file '" + path + "' " + why);
    if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
      throw DataError("text file '" + path + "' is " + kind + ", expected a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError("text file '" + path + "' cannot be read: " + std::strerror(errno));
    if (in.peek() == std::ifstream::traits_type::eof())
      throw DataError("text file '" + path + "' is empty, expected at least one byte of text");
  }
  // Reproducible: one thread (the unigram trainer's sums do not depend on a split of the work),
  // every sentence in file order (no sampling, no shuffle: no random draw at all), and the text
  // handed over as sentences rather than file names, so the model records no path. Lossless:
  // no normalisation, spaces kept as they are, the newline a piece of its own and any byte that
  // is not a piece written as a byte piece, so decode(encode(text)) is the text.
  const std::string type = options.type;
  std::string spec;
  const auto set = [&](const std::string& key, const std::string& value) { spec += key + "=" + value + "\x1e"; };
  set("model_type", type);
  set("vocab_size", std::to_string(options.vocab));
  set("num_threads", "1");
  set("input_sentence_size", "0");
  set("shuffle_input_sentence", "false");
  set("character_coverage", "1.0");
  set("byte_fallback", "true");
  set("normalization_rule_name", "identity");
  set("remove_extra_whitespaces", "false");
  set("add_dummy_prefix", "false");
  set("allow_whitespace_only_pieces", "true");
  set("split_by_whitespace", "true");
  set("user_defined_symbols", "\n");
  set("unk_id", "0");
  set("bos_id", "-1");
  set("eos_id", "-1");
  set("pad_id", "-1");
  set("minloglevel", "2");
  LineSource lines;
  lines.files = options.files;
  char* bytes = nullptr;
  size_t size = 0;
  char* error = nullptr;
  if (bridge().train(spec.c_str(), &LineSource::next, &lines, &bytes, &size, &error) != 0) {
    const std::string why = take_error(error);
    std::string texts;
    for (const std::string& f : options.files) texts += (texts.empty() ? "'" : ", '") + f + "'";
    const bool too_high = why.find("too high") != std::string::npos || why.find("<=") != std::string::npos;
    const bool too_low = why.find("smaller than required") != std::string::npos;
    throw ConfigError("data tokenizer: --vocab " + std::to_string(options.vocab) +
                      (too_high  ? " is more than the text of " + texts + " allows"
                       : too_low ? " is fewer than the characters of " + texts + " need"
                                 : " (--type " + type + ") cannot be trained on " + texts) +
                      " (SentencePiece: " + why + ")");
  }
  std::string model(bytes, size);
  bridge().free(bytes);
  return model;
}

}  // namespace mgt::data
