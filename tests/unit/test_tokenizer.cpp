// SentencePiece tokenizers (datasets/tokenizer.*) and token files of uint16 and uint32 ids
// (datasets/token_file.*, token_reader.*): training is reproducible and lossless, conversion writes
// the ids the tokenizer gives with the model inside, and the reader gives back every width's ids,
// refusing a token past the vocabulary, a damaged chunk or model, and another integer width.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/crc32.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/token_file.hpp"
#include "datasets/token_reader.hpp"
#include "datasets/tokenizer.hpp"
#include "mgtrain/error.hpp"

namespace fs = std::filesystem;
using namespace mgt;
using namespace mgt::data;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(MGTRAIN_BINARY_DIR) / "test-work" / "unit_tokenizer";
  fs::create_directories(dir);
  return dir / name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// 60 KB of Debian's fortunes, with a tab, UTF-8 and doubled spaces added.
std::string corpus_file() {
  const std::string text =
      read_file("/usr/share/games/fortunes/cookie").substr(0, 60000) + "\tcafé, naïve\n  two spaces\n\n";
  const fs::path path = scratch("corpus.txt");
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

const std::string& trained_model() {
  static const std::string model = [] {
    TokenizerTraining t;
    t.files = {corpus_file()};
    t.vocab = 600;
    return train_tokenizer(t);
  }();
  return model;
}

// A token file written by hand: /tokens of `file_type`, its checksums, and a SentencePiece model.
void write_token_file(const std::string& path, hid_t file_type, const std::vector<uint32_t>& ids, int64_t vocab,
                      const std::string& model) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = ids.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t dset = H5Dcreate2(file, "tokens", file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data());
  H5Dclose(dset);
  // The checksum covers the ids as stored: read them back in the file's width.
  const size_t width = H5Tget_size(file_type);
  std::vector<uint8_t> stored(n * width);
  dset = H5Dopen2(file, "tokens", H5P_DEFAULT);
  H5Dread(dset,
          width == 1   ? H5T_NATIVE_UINT8
          : width == 2 ? H5T_NATIVE_UINT16
                       : H5T_NATIVE_UINT32,
          H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data());
  H5Dclose(dset);
  H5Sclose(space);
  const uint32_t crc = crc32_update(0, stored.data(), stored.size());
  const hsize_t one = 1;
  space = H5Screate_simple(1, &one, nullptr);
  dset = H5Dcreate2(file, "tokens_crc32", H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &crc);
  H5Dclose(dset);
  H5Sclose(space);
  const hsize_t size = model.size();
  space = H5Screate_simple(1, &size, nullptr);
  dset = H5Dcreate2(file, "tokenizer", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data());
  h5::write_attr_uint32(dset, "crc32", crc32_update(0, model.data(), model.size()));
  H5Dclose(dset);
  H5Sclose(space);
  h5::write_attr_int64(file, "vocab_size", vocab);
  h5::write_attr_string(file, "tokenizer", kSentencePiece);
  h5::write_attr_string(file, "tokenizer_sha256", tokenizer_sha256(model));
  H5Fclose(file);
}

std::vector<uint32_t> windows_of(const std::string& path) {
  const TokenFileInfo info = open_token_info(path);
  TokenWindows windows(info);
  std::vector<uint32_t> ids(static_cast<size_t>(info.tokens));
  windows.read(0, info.tokens, ids.data());
  return ids;
}

}  // namespace

TEST(Tokenizer, TrainingIsReproducibleAndTheTextRoundTrips) {
  const std::string& model = trained_model();
  TokenizerTraining again;
  again.files = {corpus_file()};
  again.vocab = 600;
  EXPECT_EQ(train_tokenizer(again), model);
  again.type = "unigram";
  EXPECT_NE(train_tokenizer(again), model);
  const Tokenizer tokenizer(model, "test");
  EXPECT_EQ(tokenizer.vocab_size(), 600);
  const std::string text = read_file(corpus_file());
  const std::vector<int32_t> ids = tokenizer.encode(text);
  EXPECT_LT(ids.size(), text.size() * 6 / 10);  // subwords, not bytes
  EXPECT_EQ(tokenizer.decode(ids), text);       // newlines, tabs, doubled spaces and UTF-8 kept
  // A character the training text never had comes back through its byte pieces.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xe2\x82\xac 5")), "\xe2\x82\xac 5");
  // Bytes that are not UTF-8 are SentencePiece's U+FFFD: the text must be UTF-8 (or ASCII).
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xe9t\xe9")), "\xef\xbf\xbdt\xef\xbf\xbd");
}

TEST(Tokenizer, RefusesWhatIsNotAModelAndAVocabularyOutOfRange) {
  EXPECT_THROW(Tokenizer("not a model at all", "x"), DataError);
  EXPECT_THROW(Tokenizer(trained_model().substr(0, 100), "x"), DataError);
  EXPECT_THROW(Tokenizer::from_file(scratch("missing.model").string()), DataError);
  TokenizerTraining t;
  t.files = {corpus_file()};
  t.vocab = 10;
  EXPECT_THROW(train_tokenizer(t), ConfigError);
  t.vocab = 200000;  // more pieces than the text has
  try {
    train_tokenizer(t);
    FAIL() << "a vocabulary larger than the text allows was trained";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the text"), std::string::npos) << e.what();
  }
}

TEST(TokenFiles, ConvertWritesTheTokenizersIdsAsUint16WithTheModel) {
  const Tokenizer tokenizer(trained_model(), "test");
  const std::string out = scratch("u16.h5").string();
  int64_t tokens = 0;
  convert_text({corpus_file()}, out, &tokenizer, &tokens);
  const TokenFileInfo info = open_token_info(out);
  EXPECT_EQ(info.token_bytes, 2);
  EXPECT_EQ(info.vocab_size, 600);
  EXPECT_EQ(info.tokenizer, kSentencePiece);
  EXPECT_EQ(info.tokenizer_sha256, tokenizer.sha256());
  EXPECT_EQ(read_tokenizer_bytes(info), trained_model());
  const std::vector<int32_t> expected = tokenizer.encode(read_file(corpus_file()));
  ASSERT_EQ(tokens, static_cast<int64_t>(expected.size()));
  const std::vector<uint32_t> got = windows_of(out);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin()));
  const std::vector<uint8_t> stored = read_tokens(info);
  for (size_t i = 0; i < expected.size(); i += 97)
    EXPECT_EQ(token_at(stored, 2, static_cast<int64_t>(i)), static_cast<uint32_t>(expected[i]));
}

TEST(TokenFiles, TheReaderGivesUint32IdsAndTheSameWindowsInMemory) {
  std::vector<uint32_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 7919) % 70000);
  ids[5] = 69999;  // past uint16
  const std::string path = scratch("u32.h5").string();
  write_token_file(path, H5T_STD_U32LE, ids, 70000, trained_model());
  EXPECT_EQ(open_token_info(path).token_bytes, 4);
  EXPECT_EQ(windows_of(path), ids);
  ReaderOptions options;
  options.path = path;
  options.context = 16;
  options.global_batch = 4;
  options.world = 1;
  options.shuffle = false;
  TokenReader windows(options);
  options.in_memory = true;
  TokenReader memory(options);
  windows.start(0, 0);
  memory.start(0, 0);
  const Batch a = windows.next(), b = memory.next();
  ASSERT_EQ(a.rows, 4);
  for (int64_t i = 0; i < 4 * 16; ++i) {
    EXPECT_EQ(a.x.data()[i], static_cast<float>(ids[static_cast<size_t>(i / 16 * 16 + i % 16)]));
    EXPECT_EQ(a.x.data()[i], b.x.data()[i]);
    EXPECT_EQ(a.y[i], b.y[i]);
  }
  EXPECT_EQ(a.x.data()[5], 69999.0f);
}

TEST(TokenFiles, RefusesATokenPastTheVocabularyAnotherWidthAndADamagedModel) {
  std::vector<uint32_t> ids(100, 3);
  ids[42] = 600;
  const std::string path = scratch("bad.h5").string();
  write_token_file(path, H5T_STD_U16LE, ids, 600, trained_model());
  try {
    windows_of(path);
    FAIL() << "token 42 past the vocabulary was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token 42 is 600, expected below vocab_size 600"), std::string::npos)
        << e.what();
  }
  ids[42] = 3;
  write_token_file(path, H5T_STD_U64LE, ids, 600, trained_model());
  EXPECT_THROW(open_token_info(path), DataError);
  write_token_file(path, H5T_STD_U16LE, ids, 70000, trained_model());  // more ids than uint16 holds
  EXPECT_THROW(open_token_info(path), DataError);
  write_token_file(path, H5T_STD_U16LE, ids, 600, trained_model());
  EXPECT_NO_THROW(open_token_info(path));
  // One byte of the stored model changed: its checksum no longer matches.
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t dset = H5Dopen2(file, "tokenizer", H5P_DEFAULT);
  std::string model = trained_model();
  model[10] ^= 1;
  H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data());
  H5Dclose(dset);
  H5Fclose(file);
  EXPECT_THROW(open_token_info(path), DataError);
}

TEST(TokenFiles, IdWidthFollowsTheVocabulary) {
  EXPECT_EQ(token_bytes_for(256), 1);
  EXPECT_EQ(token_bytes_for(257), 2);
  EXPECT_EQ(token_bytes_for(65536), 2);
  EXPECT_EQ(token_bytes_for(65537), 4);
}
