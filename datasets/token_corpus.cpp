#include "datasets/token_corpus.hpp"

#include <utility>

#include "mgtrain/error.hpp"

namespace mgt::data {

TokenCorpus::TokenCorpus(const std::string& spec) : spec_(spec) {
  std::vector<ShardFacts> facts;
  for (const std::string& path : expand_data_files(spec)) {
    files_.push_back(open_token_info(path));
    facts.push_back(shard_facts(files_.back()));
  }
  check_shards_agree(spec, facts);
  starts_.push_back(0);
  for (const TokenFileInfo& file : files_) starts_.push_back(starts_.back() + file.tokens);
  info_ = files_.front();
  if (files_.size() == 1) return;
  info_.path = spec;
  info_.tokens = starts_.back();
  info_.sources.clear();
  for (const TokenFileInfo& file : files_)
    info_.sources.insert(info_.sources.end(), file.sources.begin(), file.sources.end());
}

TokenCorpus::~TokenCorpus() = default;

void TokenCorpus::open(bool in_memory) {
  windows_.clear();
  memory_.clear();
  if (in_memory) {
    // One file's tokens are the corpus: moved, not copied, so its peak is the file's size once.
    if (files_.size() > 1) memory_.reserve(static_cast<size_t>(info_.tokens * info_.token_bytes));
    for (const TokenFileInfo& file : files_) {
      std::vector<uint8_t> tokens = read_tokens(file);
      if (memory_.empty())
        memory_ = std::move(tokens);
      else
        memory_.insert(memory_.end(), tokens.begin(), tokens.end());
    }
    return;
  }
  for (const TokenFileInfo& file : files_) windows_.push_back(std::make_unique<TokenWindows>(file));
}

void TokenCorpus::read(int64_t offset, int64_t count, uint32_t* out) {
  if (!memory_.empty()) {
    MGT_CHECK(offset >= 0 && count > 0 && offset + count <= info_.tokens, Error,
              "token file '" + info_.path + "': window " + std::to_string(offset) + " + " + std::to_string(count) +
                  " outside its " + std::to_string(info_.tokens) + " tokens");
    for (int64_t t = 0; t < count; ++t) out[t] = token_at(memory_, info_.token_bytes, offset + t);
    return;
  }
  MGT_CHECK(windows_.size() == files_.size(), Error, "token corpus '" + info_.path + "' read before open()");
  file_spans(starts_, offset, count, spans_);
  for (const FileSpan& span : spans_) {
    windows_[span.file]->read(span.offset, span.count, out);
    out += span.count;
  }
}

void TokenCorpus::check_size(int64_t epoch, int64_t batch) const {
  for (const auto& windows : windows_) windows->check_size(epoch, batch);
}

}  // namespace mgt::data
