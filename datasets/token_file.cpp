#include "datasets/token_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>

#include "base/sha256.hpp"
#include "datasets/crc32.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/regular_file.hpp"
#include "datasets/tokenizer.hpp"
#include "mgtrain/error.hpp"

namespace mgt::data {

namespace {

constexpr const char* kTokens = "tokens";
constexpr const char* kTokensCrc = "tokens_crc32";
constexpr const char* kTokenizer = "tokenizer";

// HDF5's little-endian file type and this host's memory type for ids of `bytes` bytes; the
// checksums cover the ids as stored, which on this little-endian host are the bytes in memory.
hid_t file_type_of(int bytes) { return bytes == 1 ? H5T_STD_U8LE : bytes == 2 ? H5T_STD_U16LE : H5T_STD_U32LE; }
hid_t memory_type_of(int bytes) {
  return bytes == 1 ? H5T_NATIVE_UINT8 : bytes == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
}

template <typename T>
void write_attr_array(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const std::vector<T>& values) {
  const hsize_t n = values.size();
  h5::Id s = h5::space(H5Screate_simple(1, &n, nullptr));
  h5::Id a = h5::attr(H5Acreate2(obj, name, file_type, s.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), mem_type, values.data()) < 0)
    throw IoError(std::string("writing attribute '") + name + "' failed: " + h5::error_text());
}

// A source file opened for reading, refused by name when it is not a readable regular file: a
// missing one, a dangling link or a loop in the words --csv and `data inspect` use.
int open_source(const std::string& path) {
  struct stat info {};
  if (const std::string why = unreachable_path(path, &info); !why.empty())
    throw DataError("text file '" + path + "' " + why);
  if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
    throw DataError("text file '" + path + "' is " + kind + ", expected a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError("text file '" + path + "' cannot be read: " + std::strerror(errno));
  return fd;
}

// Writes /tokens (extended chunk by chunk) through an h5::TemporaryOutput.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& out, int token_bytes) : file_(out), token_bytes_(token_bytes) {
    const hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = static_cast<hsize_t>(kTokenChunk);
    h5::Id space = h5::space(H5Screate_simple(1, &zero, &unlimited));
    h5::Id plist = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(plist.get(), 1, &chunk);
    // No modification times: the same text gives the same file bytes.
    H5Pset_obj_track_times(plist.get(), false);
    tokens_ = h5::dataset(H5Dcreate2(file_.get(), kTokens, file_type_of(token_bytes_), space.get(), H5P_DEFAULT,
                                     plist.get(), H5P_DEFAULT));
    if (!tokens_) fail("creating /tokens");
  }

  // Appends whole chunks of n ids (the last may be short); their checksums go to /tokens_crc32.
  void append(const uint8_t* data, int64_t n) {
    if (n <= 0) return;
    const hsize_t start = static_cast<hsize_t>(written_), count = static_cast<hsize_t>(n),
                  size = static_cast<hsize_t>(written_ + n);
    if (H5Dset_extent(tokens_.get(), &size) < 0) fail("extending /tokens");
    h5::Id file_space = h5::space(H5Dget_space(tokens_.get()));
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    h5::Id mem_space = h5::space(H5Screate_simple(1, &count, nullptr));
    if (H5Dwrite(tokens_.get(), memory_type_of(token_bytes_), mem_space.get(), file_space.get(), H5P_DEFAULT, data) < 0)
      fail("writing tokens " + std::to_string(written_) + ".." + std::to_string(written_ + n - 1));
    chunk_crc_.push_back(crc32_update(0, data, static_cast<size_t>(n * token_bytes_)));
    written_ += n;
  }

  void commit(const std::vector<TextSource>& sources, const Tokenizer* tokenizer) {
    const hsize_t chunks = chunk_crc_.size();
    h5::Id space = h5::space(H5Screate_simple(1, &chunks, nullptr));
    h5::Id crc = h5::dataset(
        H5Dcreate2(file_.get(), kTokensCrc, H5T_STD_U32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!crc || H5Dwrite(crc.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, chunk_crc_.data()) < 0)
      fail(std::string("writing /") + kTokensCrc);
    h5::write_attr_int64(crc.get(), "chunk_tokens", kTokenChunk);
    crc.reset();
    std::vector<std::string> names;
    std::vector<int64_t> bytes;
    std::vector<uint32_t> crcs;
    for (const TextSource& s : sources) {
      names.push_back(s.path);
      bytes.push_back(s.bytes);
      crcs.push_back(s.crc32);
    }
    h5::write_attr_int64(file_.get(), "vocab_size", tokenizer ? tokenizer->vocab_size() : 256);
    h5::write_attr_string(file_.get(), "tokenizer", tokenizer ? kSentencePiece : "bytes");
    h5::write_attr_strings(file_.get(), "sources", names);
    write_attr_array(file_.get(), "source_bytes", H5T_STD_I64LE, H5T_NATIVE_INT64, bytes);
    write_attr_array(file_.get(), "source_crc32", H5T_STD_U32LE, H5T_NATIVE_UINT32, crcs);
    if (tokenizer) {
      // The model that made the ids, so every later step (train, eval, generate) uses it unasked.
      const std::string& model = tokenizer->bytes();
      const hsize_t size = model.size();
      h5::Id model_space = h5::space(H5Screate_simple(1, &size, nullptr));
      h5::Id dset = h5::dataset(
          H5Dcreate2(file_.get(), kTokenizer, H5T_STD_U8LE, model_space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!dset || H5Dwrite(dset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data()) < 0)
        fail(std::string("writing /") + kTokenizer);
      h5::write_attr_uint32(dset.get(), "crc32", crc32_update(0, model.data(), model.size()));
      dset.reset();
      h5::write_attr_string(file_.get(), "tokenizer_sha256", tokenizer->sha256());
    }
    tokens_.reset();
    file_.commit();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { file_.fail(what); }

  h5::TemporaryOutput file_;  // first: /tokens closes before it
  int token_bytes_ = 1;
  h5::Id tokens_;
  int64_t written_ = 0;
  std::vector<uint32_t> chunk_crc_;
};

}  // namespace

int token_bytes_for(int64_t vocab_size) { return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4; }

namespace {

// Encodes text with a tokenizer into whole chunks of ids for the writer.
class IdChunks {
 public:
  IdChunks(TokenFileWriter& writer, const Tokenizer& tokenizer)
      : writer_(writer), tokenizer_(tokenizer), bytes_(token_bytes_for(tokenizer.vocab_size())) {
    chunk_.resize(static_cast<size_t>(kTokenChunk * bytes_));
  }
  // `text` is whole lines (or a run with no newline), each encoded on its own with its newline:
  // the ids are then those of line after line whatever the buffer held (a unigram model breaks
  // ties between equal segmentations by where its input starts), and SentencePiece's memory
  // stays that of a line.
  void encode(std::string_view text) {
    while (!text.empty()) {
      const size_t newline = text.find('\n');
      const size_t take = newline == std::string_view::npos ? text.size() : newline + 1;
      encode_run(text.substr(0, take));
      text.remove_prefix(take);
    }
  }

 private:
  void encode_run(std::string_view text) {
    for (const int32_t id : tokenizer_.encode(text)) {
      const auto v = static_cast<uint32_t>(id);
      uint8_t* p = chunk_.data() + filled_ * bytes_;
      for (int b = 0; b < bytes_; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
      ++total_;
      if (++filled_ == kTokenChunk) flush();
    }
  }

 public:
  void flush() {
    writer_.append(chunk_.data(), filled_);
    filled_ = 0;
  }
  int64_t total() const { return total_; }

 private:
  TokenFileWriter& writer_;
  const Tokenizer& tokenizer_;
  int bytes_;
  std::vector<uint8_t> chunk_;
  int64_t filled_ = 0, total_ = 0;
};

}  // namespace

std::vector<TextSource> convert_text(const std::vector<std::string>& files, const std::string& out,
                                     const Tokenizer* tokenizer, int64_t* tokens) {
  if (files.empty()) throw ConfigError("data convert --text: give at least one text file");
  if (tokenizer && tokenizer->vocab_size() > kMaxVocab)
    throw ConfigError("data convert --tokenizer: the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                      " pieces, expected at most " + std::to_string(kMaxVocab) + " (ids reach the model as float32)");
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  // Every source is checked before the output is created: a bad one leaves nothing behind. Empty
  // is what a read finds, not stat's size: a /proc file has size 0 and content.
  for (const std::string& path : files) {
    const int fd = open_source(path);
    char first = 0;
    ssize_t got = 0;
    do got = ::read(fd, &first, 1);
    while (got < 0 && errno == EINTR);
    const int err = errno;
    ::close(fd);
    if (got < 0) throw DataError("text file '" + path + "' cannot be read: " + std::strerror(err));
    if (got == 0) throw DataError("text file '" + path + "' is empty, expected at least one byte of text");
  }
  TokenFileWriter writer(out, tokenizer ? token_bytes_for(tokenizer->vocab_size()) : 1);
  std::optional<IdChunks> ids;
  if (tokenizer) ids.emplace(writer, *tokenizer);
  std::vector<TextSource> sources;
  std::vector<uint8_t> chunk(static_cast<size_t>(kTokenChunk));
  size_t filled = 0;
  for (const std::string& path : files) {
    const int fd = open_source(path);
    TextSource source{path, 0, 0};
    while (true) {
      const ssize_t got = ::read(fd, chunk.data() + filled, chunk.size() - filled);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int err = errno;
        ::close(fd);
        throw DataError("text file '" + path + "' cannot be read at byte " + std::to_string(source.bytes) + ": " +
                        std::strerror(err));
      }
      if (got == 0) break;
      source.crc32 = crc32_update(source.crc32, chunk.data() + filled, static_cast<size_t>(got));
      source.bytes += got;
      filled += static_cast<size_t>(got);
      if (ids) {
        // Whole lines at a time (a run with no newline in a full buffer as it is), so the ids do
        // not depend on where the buffer ends.
        const auto* begin = reinterpret_cast<const char*>(chunk.data());
        const std::string_view text(begin, filled);
        const size_t newline = text.rfind('\n');
        const size_t take = newline != std::string_view::npos ? newline + 1 : filled == chunk.size() ? filled : 0;
        ids->encode(text.substr(0, take));
        std::memmove(chunk.data(), chunk.data() + take, filled - take);
        filled -= take;
      } else if (filled == chunk.size()) {
        writer.append(chunk.data(), static_cast<int64_t>(filled));
        filled = 0;
      }
    }
    ::close(fd);
    if (ids) {  // each file's last line, newline or not, ends with the file
      ids->encode(std::string_view(reinterpret_cast<const char*>(chunk.data()), filled));
      filled = 0;
    }
    if (source.bytes == 0) throw DataError("text file '" + path + "' is empty, expected at least one byte of text");
    sources.push_back(source);
  }
  if (ids) {
    ids->flush();
    if (tokens) *tokens = ids->total();
  } else {
    writer.append(chunk.data(), static_cast<int64_t>(filled));
    if (tokens) {
      *tokens = 0;
      for (const TextSource& s : sources) *tokens += s.bytes;
    }
  }
  writer.commit(sources, tokenizer);
  return sources;
}

bool is_token_file(const std::string& path) {
  if (!non_regular_kind(path).empty()) return false;
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::silence_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) return false;
  h5::Id file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  return file && H5Lexists(file.get(), kTokens, H5P_DEFAULT) > 0;
}

namespace {

struct OpenedTokens {
  h5::Id file, tokens, crc;
};

std::string token_file_named(const std::string& path) { return "token file '" + path + "'"; }

std::string read_tokenizer_bytes(const TokenFileInfo& info, hid_t file) {
  const auto fail = [&](const std::string& what) { throw DataError(token_file_named(info.path) + ": " + what); };
  if (H5Lexists(file, kTokenizer, H5P_DEFAULT) <= 0)
    fail("has no dataset '/tokenizer' (the SentencePiece model its attribute tokenizer names)");
  h5::Id dset = h5::dataset(H5Dopen2(file, kTokenizer, H5P_DEFAULT));
  if (!dset) fail("'/tokenizer' is not a dataset");
  h5::Id space = h5::space(H5Dget_space(dset.get()));
  const Shape dims = h5::dims_of(space.get());
  h5::Id type = h5::type(H5Dget_type(dset.get()));
  if (dims.size() != 1 || dims[0] < 1 || H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1)
    fail("dataset '/tokenizer' is " + h5::type_name(type.get()) + " " + shape_string(dims) +
         ", expected uint8 [bytes] (a serialized SentencePiece model)");
  h5::require_rows_stored(dset.get(), token_file_named(info.path) + ": dataset '/tokenizer'");
  std::string bytes(static_cast<size_t>(dims[0]), '\0');
  if (H5Dread(dset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    fail("reading '/tokenizer' failed: " + h5::error_text());
  uint32_t stored = 0;
  const uint32_t crc = crc32_update(0, bytes.data(), bytes.size());
  if (h5::read_attr_integer(dset.get(), "crc32", H5T_NATIVE_UINT32, &stored).kind != h5::AttrFailure::Kind::none)
    fail("dataset '/tokenizer' has no attribute 'crc32'");
  char text[120];
  if (crc != stored) {
    std::snprintf(text, sizeof text, "dataset '/tokenizer' has CRC-32 %08x, its attribute crc32 says %08x", crc,
                  stored);
    fail(std::string(text) + ": the file is damaged");
  }
  const std::string sha = tokenizer_sha256(bytes);
  if (sha != info.tokenizer_sha256)
    fail("dataset '/tokenizer' has SHA-256 " + sha + ", attribute 'tokenizer_sha256' says " + info.tokenizer_sha256);
  return bytes;
}

OpenedTokens open_tokens(const std::string& path, TokenFileInfo& info) {
  const auto fail = [&](const std::string& what) { throw DataError(token_file_named(path) + ": " + what); };
  OpenedTokens o;
  o.file = h5::open_readonly(path, token_file_named(path));
  if (H5Lexists(o.file.get(), kTokens, H5P_DEFAULT) <= 0)
    fail("has no dataset '/tokens' (a token file is written by `mgtrain data convert --text`)");
  o.tokens = h5::dataset(H5Dopen2(o.file.get(), kTokens, H5P_DEFAULT));
  if (!o.tokens) fail("'/tokens' is not a dataset");
  h5::Id space = h5::space(H5Dget_space(o.tokens.get()));
  const Shape dims = h5::dims_of(space.get());
  if (dims.size() != 1) fail("dataset '/tokens' has shape " + shape_string(dims) + ", expected 1-D [tokens]");
  h5::Id type = h5::type(H5Dget_type(o.tokens.get()));
  const size_t width = H5Tget_size(type.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || (width != 1 && width != 2 && width != 4) ||
      H5Tget_sign(type.get()) != H5T_SGN_NONE)
    fail("dataset '/tokens' is " + h5::type_name(type.get()) + ", expected uint8, uint16 or uint32 (token ids)");
  info.token_bytes = static_cast<int>(width);
  info.path = path;
  info.tokens = dims[0];
  if (info.tokens < 1) fail("dataset '/tokens' is empty, expected at least one token");
  // Before anything is read or sized by the declared length: every chunk stored (an extent set
  // with nothing written reads as zeros), through filters this HDF5 has.
  h5::require_rows_stored(o.tokens.get(), token_file_named(path) + ": dataset '/tokens'");
  if (!h5::read_attr_int64(o.file.get(), "vocab_size", info.vocab_size))
    fail("has no integer attribute 'vocab_size' on the root");
  const int64_t type_limit = std::min<int64_t>(int64_t{1} << (8 * info.token_bytes), kMaxVocab);
  if (info.vocab_size < 1 || info.vocab_size > type_limit)
    fail("attribute 'vocab_size' is " + std::to_string(info.vocab_size) + ", expected 1.." +
         std::to_string(type_limit) + " (uint" + std::to_string(8 * info.token_bytes) + " tokens" +
         (type_limit == kMaxVocab ? ", ids exact in float32" : "") + ")");
  std::vector<std::string> tokenizer;
  info.tokenizer =
      h5::read_attr_strings(o.file.get(), "tokenizer", tokenizer) && !tokenizer.empty() ? tokenizer[0] : "bytes";
  // Any other tokenizer name is informational, as it always was, for byte tokens alone.
  if (info.tokenizer != kSentencePiece && info.vocab_size > 256)
    fail("attribute 'vocab_size' is " + std::to_string(info.vocab_size) + ", expected at most 256 for tokenizer '" +
         printable(info.tokenizer) + "' (a larger vocabulary comes with tokenizer = sentencepiece and its model)");
  if (info.tokenizer == kSentencePiece) {
    std::vector<std::string> sha;
    if (!h5::read_attr_strings(o.file.get(), "tokenizer_sha256", sha) || sha.empty() || sha[0].size() != 64)
      fail("has no attribute 'tokenizer_sha256' (64 hex digits) beside tokenizer = sentencepiece");
    info.tokenizer_sha256 = sha[0];
    info.path = path;
    read_tokenizer_bytes(info, o.file.get());  // a damaged model is found now, not when it is used
  }
  std::vector<std::string> names;
  std::vector<double> bytes, crcs;
  if (h5::read_attr_strings(o.file.get(), "sources", names) &&
      h5::read_attr_doubles(o.file.get(), "source_bytes", bytes) &&
      h5::read_attr_doubles(o.file.get(), "source_crc32", crcs) && bytes.size() == names.size() &&
      crcs.size() == names.size())
    for (size_t i = 0; i < names.size(); ++i)
      info.sources.push_back({names[i], static_cast<int64_t>(bytes[i]), static_cast<uint32_t>(crcs[i])});
  if (H5Lexists(o.file.get(), kTokensCrc, H5P_DEFAULT) <= 0)
    fail("has no dataset '/tokens_crc32' (the chunks' checksums)");
  o.crc = h5::dataset(H5Dopen2(o.file.get(), kTokensCrc, H5P_DEFAULT));
  if (!o.crc) fail("'/tokens_crc32' is not a dataset");
  h5::Id crc_space = h5::space(H5Dget_space(o.crc.get()));
  const Shape crc_dims = h5::dims_of(crc_space.get());
  const int64_t chunks = (info.tokens + kTokenChunk - 1) / kTokenChunk;
  if (crc_dims.size() != 1 || crc_dims[0] != chunks)
    fail("dataset '/tokens_crc32' has shape " + shape_string(crc_dims) + ", expected [" + std::to_string(chunks) +
         "] (one per " + std::to_string(kTokenChunk) + " tokens)");
  h5::require_rows_stored(o.crc.get(), token_file_named(path) + ": dataset '/tokens_crc32'");
  return o;
}

}  // namespace

TokenFileInfo open_token_info(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  TokenFileInfo info;
  open_tokens(path, info);
  return info;
}

namespace {

// Opens the file again for reading and checks it is the one `expected` describes.
OpenedTokens reopen_tokens(const TokenFileInfo& expected, TokenFileInfo& info) {
  OpenedTokens o = open_tokens(expected.path, info);
  if (info.tokens != expected.tokens)
    throw DataError("token file '" + info.path + "': holds " + std::to_string(info.tokens) + " tokens, expected " +
                    std::to_string(expected.tokens) + " (changed while open)");
  return o;
}

// Reads /tokens a chunk at a time, each to buffer_at(first token of the chunk) (room for
// kTokenChunk ids as stored), and checks each chunk's CRC-32 against /tokens_crc32 and its tokens against
// vocab_size.
template <typename BufferAt>
void check_chunks(const OpenedTokens& o, const TokenFileInfo& info, BufferAt buffer_at) {
  const auto fail = [&](const std::string& what) { throw DataError("token file '" + info.path + "': " + what); };
  std::vector<uint32_t> crc(static_cast<size_t>((info.tokens + kTokenChunk - 1) / kTokenChunk));
  if (H5Dread(o.crc.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, crc.data()) < 0)
    fail("reading '/tokens_crc32' failed: " + h5::error_text());
  h5::Id file_space = h5::space(H5Dget_space(o.tokens.get()));
  for (size_t c = 0; c < crc.size(); ++c) {
    const auto begin = static_cast<hsize_t>(c) * static_cast<hsize_t>(kTokenChunk);
    const hsize_t n = std::min(static_cast<hsize_t>(info.tokens) - begin, static_cast<hsize_t>(kTokenChunk));
    const int width = info.token_bytes;
    uint8_t* buffer = buffer_at(static_cast<size_t>(begin) * static_cast<size_t>(width));
    h5::Id memory_space = h5::space(H5Screate_simple(1, &n, nullptr));
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &begin, nullptr, &n, nullptr) < 0 ||
        H5Dread(o.tokens.get(), memory_type_of(width), memory_space.get(), file_space.get(), H5P_DEFAULT, buffer) < 0)
      fail("reading '/tokens' failed: " + h5::error_text());
    const uint32_t got = crc32_update(0, buffer, static_cast<size_t>(n) * static_cast<size_t>(width));
    if (got != crc[c]) {
      char text[160];
      std::snprintf(
          text, sizeof text, "tokens %llu..%llu have CRC-32 %08x, '/tokens_crc32'[%zu] says %08x: the file is damaged",
          static_cast<unsigned long long>(begin), static_cast<unsigned long long>(begin + n - 1), got, c, crc[c]);
      fail(text);
    }
    if (width == 1 && info.vocab_size < 256) {
      const uint8_t* bad = std::find_if(buffer, buffer + n, [&](uint8_t t) { return t >= info.vocab_size; });
      if (bad != buffer + n)
        fail("token " + std::to_string(begin + static_cast<hsize_t>(bad - buffer)) + " is " + std::to_string(*bad) +
             ", expected below vocab_size " + std::to_string(info.vocab_size));
    } else if (width > 1) {
      const auto limit = static_cast<uint64_t>(info.vocab_size);
      for (hsize_t i = 0; i < n; ++i) {
        uint32_t t = 0;
        std::memcpy(&t, buffer + i * width, static_cast<size_t>(width));  // little-endian host
        if (t >= limit)
          fail("token " + std::to_string(begin + i) + " is " + std::to_string(t) + ", expected below vocab_size " +
               std::to_string(info.vocab_size));
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> read_tokens(const TokenFileInfo& expected) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  TokenFileInfo info;
  const OpenedTokens o = reopen_tokens(expected, info);
  std::vector<uint8_t> tokens(static_cast<size_t>(info.tokens) * static_cast<size_t>(info.token_bytes));
  check_chunks(o, info, [&](size_t begin) { return tokens.data() + begin; });
  return tokens;
}

std::string read_tokenizer_bytes(const TokenFileInfo& info) {
  if (info.tokenizer != kSentencePiece) return "";
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::Id file = h5::open_readonly(info.path, token_file_named(info.path));
  return read_tokenizer_bytes(info, file.get());
}

std::string tokenizer_name(const std::string& tokenizer, const std::string& sha256) {
  return sha256.empty() ? tokenizer : tokenizer + " (SHA-256 " + sha256.substr(0, 16) + "...)";
}

void require_tokenizer(const TokenFileInfo& info, const std::string& what, const std::string& tokenizer,
                       const std::string& sha256, const std::string& other) {
  if (info.tokenizer == tokenizer && info.tokenizer_sha256 == sha256) return;
  throw DataError(what + "token file '" + info.path + "' was made by tokenizer " +
                  tokenizer_name(info.tokenizer, info.tokenizer_sha256) + ", but " + other + " by " +
                  tokenizer_name(tokenizer, sha256) +
                  ": expected the same tokenizer (convert every file with the same --tokenizer)");
}

void require_openable(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  h5::open_readonly(path, token_file_named(path));
}

struct TokenWindows::Impl {
  TokenFileInfo info;
  OpenedTokens opened;
  // The file as HDF5 opened it (the same inode, whatever is renamed onto its name later) and its
  // size then, measured once a batch.
  int fd = -1;
  uint64_t opened_bytes = 0;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
  h5::Id direct;  // /tokens without a chunk cache: a window's read fetches its bytes, not its chunk
  h5::Id file_space;
  std::vector<uint8_t> stored;  // one window's ids as stored, widened by read()
};

TokenWindows::TokenWindows(const TokenFileInfo& expected) : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  impl_->opened = reopen_tokens(expected, impl_->info);
  impl_->fd = ::open(expected.path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat at_open {};
  if (impl_->fd < 0 || ::fstat(impl_->fd, &at_open) != 0)
    throw DataError("token file '" + expected.path + "' cannot be read: " + std::strerror(errno));
  impl_->opened_bytes = static_cast<uint64_t>(at_open.st_size);
  std::vector<uint8_t> buffer(static_cast<size_t>(kTokenChunk) * static_cast<size_t>(impl_->info.token_bytes));
  check_chunks(impl_->opened, impl_->info, [&](size_t) { return buffer.data(); });
  // The check's datasets hold a chunk in their cache: with a corpus in many shards, MBs per shard.
  impl_->opened.tokens.reset();
  impl_->opened.crc.reset();
  h5::Id access = h5::plist(H5Pcreate(H5P_DATASET_ACCESS));
  if (!access || H5Pset_chunk_cache(access.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT) < 0)
    throw DataError("token file '" + impl_->info.path + "': setting up reads failed: " + h5::error_text());
  impl_->direct = h5::dataset(H5Dopen2(impl_->opened.file.get(), kTokens, access.get()));
  if (!impl_->direct) throw DataError("token file '" + impl_->info.path + "': reopening '/tokens' failed");
  impl_->file_space = h5::space(H5Dget_space(impl_->direct.get()));
}

TokenWindows::~TokenWindows() {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  impl_.reset();
}

void TokenWindows::read(int64_t offset, int64_t count, uint32_t* out) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  MGT_CHECK(offset >= 0 && count > 0 && offset + count <= impl_->info.tokens, Error,
            "token file '" + impl_->info.path + "': window " + std::to_string(offset) + " + " + std::to_string(count) +
                " outside its " + std::to_string(impl_->info.tokens) + " tokens");
  const auto begin = static_cast<hsize_t>(offset), n = static_cast<hsize_t>(count);
  h5::Id memory_space = h5::space(H5Screate_simple(1, &n, nullptr));
  // Read as stored and widened here: HDF5's own conversion to uint32 cost more than the read (a
  // window of byte tokens took 9x as long).
  const int width = impl_->info.token_bytes;
  const hid_t as_stored = width == 1 ? H5T_NATIVE_UINT8 : width == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
  impl_->stored.resize(static_cast<size_t>(count * width));
  void* into = width == 4 ? static_cast<void*>(out) : impl_->stored.data();
  if (H5Sselect_hyperslab(impl_->file_space.get(), H5S_SELECT_SET, &begin, nullptr, &n, nullptr) < 0 ||
      H5Dread(impl_->direct.get(), as_stored, memory_space.get(), impl_->file_space.get(), H5P_DEFAULT, into) < 0)
    throw DataError("token file '" + impl_->info.path + "': reading tokens " + std::to_string(offset) + ".." +
                    std::to_string(offset + count - 1) + " failed: " + h5::error_text());
  if (width == 1) {
    for (int64_t t = 0; t < count; ++t) out[t] = impl_->stored[static_cast<size_t>(t)];
  } else if (width == 2) {
    const auto* ids = reinterpret_cast<const uint16_t*>(impl_->stored.data());
    for (int64_t t = 0; t < count; ++t) out[t] = ids[t];
  }
}

void TokenWindows::check_size(int64_t epoch, int64_t batch) const {
  struct stat now {};
  if (::fstat(impl_->fd, &now) != 0 || static_cast<uint64_t>(now.st_size) >= impl_->opened_bytes) return;
  throw DataError("data file '" + impl_->info.path + "' is now " + std::to_string(now.st_size) + " bytes, was " +
                  std::to_string(impl_->opened_bytes) + changed_since_opened(epoch, batch));
}

std::string inspect_tokens(const std::string& path) {
  const TokenFileInfo info = open_token_info(path);
  std::ostringstream out;
  out << "file: " << printable(path) << "\n"
      << "tokens: " << info.tokens << " (/tokens, uint" << 8 * info.token_bytes << ")\n"
      << "vocabulary: " << info.vocab_size << " (tokenizer: " << printable(info.tokenizer) << ")\n";
  if (!info.tokenizer_sha256.empty())
    out << "tokenizer: /tokenizer, " << read_tokenizer_bytes(info).size() << " bytes, SHA-256 " << info.tokenizer_sha256
        << "\n";
  for (const TextSource& s : info.sources) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", s.crc32);
    out << "source: " << printable(s.path) << " (" << s.bytes << " bytes, CRC-32 " << crc << ")\n";
  }
  return out.str();
}

}  // namespace mgt::data
