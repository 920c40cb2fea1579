#pragma once
// A token corpus in one file or in several (shards: data.train = corpus/part-*.h5), read as one
// stream of tokens: each shard's tokens follow the previous shard's, so a window may run from one
// file into the next, and the windows a run draws do not depend on how the corpus was split.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasets/data_files.hpp"
#include "datasets/token_file.hpp"

namespace mgt::data {

class TokenCorpus {
 public:
  // Opens every file `spec` names (expand_data_files) and checks that they agree; reads nothing
  // of their tokens yet. One file is described as open_token_info describes it; several as
  // path = spec, tokens = their sum, the shards' vocab_size and tokenizer, every shard's sources.
  explicit TokenCorpus(const std::string& spec);
  ~TokenCorpus();
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;
  const TokenFileInfo& info() const { return info_; }
  const std::vector<TokenFileInfo>& files() const { return files_; }
  // Checks every shard's chunks (TokenWindows), keeping one reader per shard, or with in_memory
  // reads every shard into memory. Throws DataError naming the shard at fault.
  void open(bool in_memory);
  // Token ids [offset, offset + count) of the whole corpus into `out`, each file's part from its
  // reader (or from memory): the one place the reader touches token storage.
  void read(int64_t offset, int64_t count, uint32_t* out);
  // TokenWindows::check_size of every shard read from files.
  void check_size(int64_t epoch, int64_t batch) const;

 private:
  std::string spec_;
  TokenFileInfo info_;
  std::vector<TokenFileInfo> files_;
  std::vector<int64_t> starts_;  // each file's first token in the corpus, then the total
  std::vector<std::unique_ptr<TokenWindows>> windows_;
  std::vector<uint8_t> memory_;  // the whole corpus as stored (info_.token_bytes each), with in_memory
  std::vector<FileSpan> spans_;
};

}  // namespace mgt::data
