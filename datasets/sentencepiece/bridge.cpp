#include "datasets/sentencepiece/bridge.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

char* copy_out(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) return nullptr;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

int fail(char** error, const std::string& text) {
  *error = copy_out(text);
  return -1;
}

// Hands SentencePiece's trainer the sentences of mgtrain's reader of the text files.
class Sentences final : public sentencepiece::SentenceIterator {
 public:
  Sentences(mgt_spm_next_sentence next, void* state) : next_(next), state_(state) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    const char* text = nullptr;
    size_t size = 0;
    done_ = next_(state_, &text, &size) == 0;
    if (!done_) value_.assign(text, size);
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  mgt_spm_next_sentence next_;
  void* state_;
  bool done_ = false;
  std::string value_;
};

}  // namespace

extern "C" {

int mgt_spm_load(const char* bytes, size_t size, void** model, char** error) {
  try {
    auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = processor->LoadFromSerializedProto(std::string(bytes, size));
    if (!status.ok()) return fail(error, status.ToString());
    if (processor->GetPieceSize() < 1) return fail(error, "it holds no pieces");
    *model = processor.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(error, e.what());
  }
}

void mgt_spm_unload(void* model) { delete static_cast<sentencepiece::SentencePieceProcessor*>(model); }

int64_t mgt_spm_vocab_size(const void* model) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(model)->GetPieceSize();
}

int mgt_spm_encode(const void* model, const char* text, size_t size, int32_t** ids, size_t* count, char** error) {
  try {
    std::vector<int> out;
    const auto status =
        static_cast<const sentencepiece::SentencePieceProcessor*>(model)->Encode(std::string_view(text, size), &out);
    if (!status.ok()) return fail(error, status.ToString());
    *ids = static_cast<int32_t*>(std::malloc(std::max<size_t>(out.size(), 1) * sizeof(int32_t)));
    if (*ids == nullptr) return fail(error, "out of memory");
    for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
    *count = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(error, e.what());
  }
}

int mgt_spm_decode(const void* model, const int32_t* ids, size_t count, char** text, size_t* size, char** error) {
  try {
    std::string out;
    const auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(model)->Decode(
        std::vector<int>(ids, ids + count), &out);
    if (!status.ok()) return fail(error, status.ToString());
    *text = copy_out(out);
    if (*text == nullptr) return fail(error, "out of memory");
    *size = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(error, e.what());
  }
}

int mgt_spm_train(const char* options, mgt_spm_next_sentence next, void* state, char** bytes, size_t* size,
                  char** error) {
  try {
    std::unordered_map<std::string, std::string> kwargs;
    std::istringstream lines(options);
    std::string line;
    while (std::getline(lines, line, '\x1e')) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) kwargs[line.substr(0, eq)] = line.substr(eq + 1);
    }
    Sentences sentences(next, state);
    std::string model;
    const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &sentences, &model);
    if (!status.ok()) return fail(error, status.ToString());
    *bytes = static_cast<char*>(std::malloc(std::max<size_t>(model.size(), 1)));
    if (*bytes == nullptr) return fail(error, "out of memory");
    std::memcpy(*bytes, model.data(), model.size());
    *size = model.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(error, e.what());
  }
}

void mgt_spm_free(void* pointer) { std::free(pointer); }
}
