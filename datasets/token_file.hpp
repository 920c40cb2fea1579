#pragma once
// The token format for language models: `/tokens`, a 1-D dataset of token ids, the source files
// concatenated in order, with attributes vocab_size, tokenizer, sources, source_bytes and
// source_crc32 on the root, and `/tokens_crc32` [chunks] uint32: the CRC-32 of each run of
// kTokenChunk tokens as stored (little-endian), checked when the tokens are read. Byte-level
// tokens (tokenizer "bytes", vocabulary 256: a token is a byte of the text) are uint8; a
// SentencePiece tokenizer's ids (tokenizer "sentencepiece") are uint16, or uint32 past 65,536 ids,
// and the model's serialized bytes are `/tokenizer` (uint8, attribute crc32) with the root's
// tokenizer_sha256. docs/data.md, "Text", describes it for users.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mgt::data {

class Tokenizer;

// Tokens per HDF5 chunk of /tokens and per checksum of /tokens_crc32: 1 MiB.
inline constexpr int64_t kTokenChunk = int64_t{1} << 20;

struct TextSource {
  std::string path;
  int64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the file's bytes
};

// Concatenates the text files, in order, into `out` as byte tokens. Streams the files through one
// chunk's buffer, so a corpus larger than memory converts in bounded memory; writes to a
// temporary name in out's directory and renames it into place, so a failure leaves nothing half
// written. Throws DataError naming a file that is missing, unreadable, not a regular file or
// empty, and IoError when the output cannot be written. Returns what each source gave. With a
// `tokenizer` the text is its ids instead, each line encoded on its own with its newline (so the
// ids do not depend on the buffer); `tokens` (when given) receives how many were written.
std::vector<TextSource> convert_text(const std::vector<std::string>& files, const std::string& out,
                                     const Tokenizer* tokenizer = nullptr, int64_t* tokens = nullptr);

// The width of a vocabulary's ids in a token file: 1, 2 or 4 bytes.
int token_bytes_for(int64_t vocab_size);

// Token ids travel to the model as float32, exact to 2^24.
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;

// Whether the HDF5 file at `path` holds a dataset /tokens (a token file rather than /x and /y).
// False for a file that is not HDF5 or cannot be opened: the sample reader then says why.
bool is_token_file(const std::string& path);

// Throws DataError "token file 'P' ..." when the file cannot be opened as HDF5 at all (missing,
// unreadable, not HDF5, truncated), so that a file is-token-file found no /tokens in is said to be
// what it is rather than "not a token file".
void require_openable(const std::string& path);

struct TokenFileInfo {
  std::string path;
  int64_t tokens = 0;            // length of /tokens
  int64_t vocab_size = 0;        // attribute vocab_size: every token is below it
  std::string tokenizer;         // attribute tokenizer: "bytes" or "sentencepiece"
  std::string tokenizer_sha256;  // sentencepiece: the SHA-256 of /tokenizer's bytes
  int token_bytes = 1;           // the width of /tokens' ids: 1, 2 or 4
  std::vector<TextSource> sources;
};

// "bytes", or "sentencepiece (SHA-256 <first 16 digits>...)": how errors name a file's tokenizer.
std::string tokenizer_name(const std::string& tokenizer, const std::string& sha256);

// Throws DataError "<what> token file 'P' was made by tokenizer X, but <other> by Y: expected
// the same tokenizer" unless the file's tokenizer is the one (kind and SHA-256) `other` used.
void require_tokenizer(const TokenFileInfo& info, const std::string& what, const std::string& tokenizer,
                       const std::string& sha256, const std::string& other);

// The serialized model of a sentencepiece token file (/tokenizer), checked against its crc32 and
// the root's tokenizer_sha256; DataError naming the file otherwise. Empty for byte tokens.
std::string read_tokenizer_bytes(const TokenFileInfo& info);

// Opens and validates a token file: /tokens exists, is 1-D, uint8, uint16 or uint32, not empty;
// vocab_size is in [1, what the type holds]; /tokens_crc32 has one value per chunk; a
// sentencepiece file's /tokenizer matches its checksums. Throws DataError with one line naming the file
// and the expected versus the actual.
TokenFileInfo open_token_info(const std::string& path);

// Every token of the file as stored (info.token_bytes bytes each, little-endian), each chunk
// checked against /tokens_crc32 and every token against vocab_size. Throws DataError naming the
// file and the first bad chunk or token.
std::vector<uint8_t> read_tokens(const TokenFileInfo& info);

// Token `i` of read_tokens' bytes.
inline uint32_t token_at(const std::vector<uint8_t>& stored, int token_bytes, int64_t i) {
  const uint8_t* p = stored.data() + i * token_bytes;
  if (token_bytes == 1) return p[0];
  if (token_bytes == 2) return static_cast<uint32_t>(p[0] | (p[1] << 8));
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// A token file read a window at a time, for a corpus that need not fit in memory: opening it
// checks every chunk against /tokens_crc32 and every token against vocab_size, streaming one chunk
// at a time (so damage is found before training starts, in memory of one chunk whatever the file's
// size); read() then fetches the bytes of one window from the file. Throws DataError as
// read_tokens does. Locks hdf5_mutex() itself.
class TokenWindows {
 public:
  explicit TokenWindows(const TokenFileInfo& info);
  ~TokenWindows();
  TokenWindows(const TokenWindows&) = delete;
  TokenWindows& operator=(const TokenWindows&) = delete;
  // Tokens [offset, offset + count) into out; DataError naming the file on a failed read.
  void read(int64_t offset, int64_t count, uint32_t* out);
  // Throws DataError naming the file when it is shorter now than when it was opened (cut while a
  // run reads it: HDF5 reads the missing bytes as zeros, which the checksums checked at the
  // opening never see). The reader calls it once a batch, after the batch's reads.
  void check_size(int64_t epoch, int64_t batch) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Multi-line summary for `mgtrain data inspect`.
std::string inspect_tokens(const std::string& path);

}  // namespace mgt::data
