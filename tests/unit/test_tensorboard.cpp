// TensorBoard event files: CRC-32C, TFRecord framing, and the Event protos read back by hand.
// With MGTRAIN_TB_OUT set, TensorBoardSampleRun.TrainerShapedRunParsesBack leaves its run there
// (an event file and a matching metrics.jsonl) for tests/e2e/read_tfevents.py during development.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "observers/tensorboard.hpp"

using namespace mgt;
namespace fs = std::filesystem;

namespace {

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, checking lengths and both masked CRCs.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    EXPECT_GE(bytes.size() - pos, 16u) << "truncated record header at " << pos;
    if (bytes.size() - pos < 16) break;
    const uint64_t length = le(bytes, pos, 8);
    EXPECT_EQ(le(bytes, pos + 8, 4), masked_crc32c(bytes.data() + pos, 8)) << "length CRC at " << pos;
    EXPECT_LE(pos + 16 + length, bytes.size()) << "truncated record at " << pos;
    if (pos + 16 + length > bytes.size()) break;
    std::string data = bytes.substr(pos + 12, length);
    EXPECT_EQ(le(bytes, pos + 12 + length, 4), masked_crc32c(data.data(), data.size())) << "data CRC at " << pos;
    records.push_back(std::move(data));
    pos += 16 + length;
  }
  return records;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A minimal protobuf reader: each field's raw payloads by field number, varints apart.
struct Fields {
  std::multimap<uint32_t, std::string> bytes;  // wire types 1, 2, 5 (raw payload)
  std::multimap<uint32_t, uint64_t> varints;   // wire type 0
};

uint64_t get_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; pos < s.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(s[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  ADD_FAILURE() << "truncated varint";
  return v;
}

Fields parse(const std::string& s) {
  Fields f;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = get_varint(s, pos);
    const auto field = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0:
        f.varints.emplace(field, get_varint(s, pos));
        break;
      case 1:
        f.bytes.emplace(field, s.substr(pos, 8));
        pos += 8;
        break;
      case 5:
        f.bytes.emplace(field, s.substr(pos, 4));
        pos += 4;
        break;
      case 2: {
        const uint64_t n = get_varint(s, pos);
        f.bytes.emplace(field, s.substr(pos, n));
        pos += n;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected wire type " << (key & 7);
        return f;
    }
    EXPECT_LE(pos, s.size());
  }
  return f;
}

double as_double(const std::string& raw) {
  EXPECT_EQ(raw.size(), 8u);
  double d;
  std::memcpy(&d, raw.data(), 8);
  return d;
}
float as_float(const std::string& raw) {
  EXPECT_EQ(raw.size(), 4u);
  float f;
  std::memcpy(&f, raw.data(), 4);
  return f;
}

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mgtrain-tb-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST(TensorBoardCrc, Crc32cKnownVectors) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, 32 bytes of ones.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(TensorBoardCrc, MaskMatchesTfRecordFormula) {
  EXPECT_EQ(mask_crc32c(0xE3069283u), 0xC78AB0E5u);  // ((c >> 15) | (c << 17)) + 0xa282ead8
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST(TensorBoardRecord, FrameHasLengthAndMaskedCrcs) {
  const std::string data = "123456789";
  const std::string rec = tfrecord_frame(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(le(rec, 0, 8), data.size());
  // Masked CRC-32C of the 8 length bytes (9, LE), then of the data.
  const std::string length_bytes("\x09\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(le(rec, 8, 4), mask_crc32c(crc32c(length_bytes.data(), 8)));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(le(rec, 12 + data.size(), 4), 0xC78AB0E5u);
  EXPECT_EQ(read_records(rec), std::vector<std::string>{data});
}

TEST(TensorBoardEvent, ScalarEventEncoding) {
  // Event{wall_time=1.5, step=300, summary{value{tag="a", simple_value=0.25f}}}, byte for byte.
  const std::string got = encode_scalar_event(1.5, 300, "a", 0.25f);
  const std::string want(
      "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"  // 1: double 1.5
      "\x10\xac\x02"                          // 2: varint 300
      "\x2a\x0a"                              // 5: Summary, 10 bytes
      "\x0a\x08"                              //   1: Value, 8 bytes
      "\x0a\x01\x61"                          //     1: tag "a"
      "\x15\x00\x00\x80\x3e",                 //     2: float 0.25
      9 + 3 + 2 + 2 + 3 + 5);
  EXPECT_EQ(got, want);
}

TEST(TensorBoardWriter, FileParsesBack) {
  const fs::path dir = scratch_dir("parse") / "nested";
  std::string path;
  {
    TensorBoardWriter writer(dir.string());
    path = writer.path();
    EXPECT_EQ(fs::path(path).parent_path(), dir);
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
    writer.flush();
    // The first record is on disk right after construction.
    const auto first = read_records(slurp(path));
    ASSERT_EQ(first.size(), 1u);
    writer.add_scalar("train/loss", 20, 2.5);
    writer.add_scalar("step_time_ms/rank1", 20, 12.125);
    writer.add_scalar("train/loss", 40, 1.25);
    writer.flush();
  }
  const auto records = read_records(slurp(path));
  ASSERT_EQ(records.size(), 4u);

  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const Fields head = parse(records[0]);
  ASSERT_EQ(head.bytes.count(1), 1u);
  EXPECT_NEAR(as_double(head.bytes.find(1)->second), now, 600.0);
  ASSERT_EQ(head.bytes.count(3), 1u);
  EXPECT_EQ(head.bytes.find(3)->second, "brain.Event:2");
  EXPECT_EQ(head.varints.count(2), 0u);

  struct Want {
    int64_t step;
    std::string tag;
    float value;
  };
  const Want wants[] = {{20, "train/loss", 2.5f}, {20, "step_time_ms/rank1", 12.125f}, {40, "train/loss", 1.25f}};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const Fields event = parse(records[i + 1]);
    ASSERT_EQ(event.bytes.count(1), 1u);
    EXPECT_NEAR(as_double(event.bytes.find(1)->second), now, 600.0);
    ASSERT_EQ(event.varints.count(2), 1u);
    EXPECT_EQ(static_cast<int64_t>(event.varints.find(2)->second), wants[i].step);
    ASSERT_EQ(event.bytes.count(5), 1u);
    const Fields summary = parse(event.bytes.find(5)->second);
    ASSERT_EQ(summary.bytes.count(1), 1u);
    const Fields value = parse(summary.bytes.find(1)->second);
    ASSERT_EQ(value.bytes.count(1), 1u);
    EXPECT_EQ(value.bytes.find(1)->second, wants[i].tag);
    ASSERT_EQ(value.bytes.count(2), 1u);
    EXPECT_EQ(as_float(value.bytes.find(2)->second), wants[i].value);
  }
  fs::remove_all(dir.parent_path());
}

TEST(TensorBoardWriter, UnwritableDirectoryThrowsIoErrorNamingPath) {
  const fs::path dir = scratch_dir("bad");
  fs::create_directories(dir);
  { std::ofstream(dir / "file") << "x"; }
  const std::string bad = (dir / "file" / "tb").string();  // a directory under a regular file
  try {
    TensorBoardWriter writer(bad);
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A run shaped like the trainer's (5 log intervals of 20 steps, 2 ranks) and its metrics.jsonl,
// checked here record by record. With MGTRAIN_TB_OUT set it is written there and kept, as sample
// input for tests/e2e/read_tfevents.py during development; otherwise into a scratch directory.
TEST(TensorBoardSampleRun, TrainerShapedRunParsesBack) {
  const char* out = std::getenv("MGTRAIN_TB_OUT");
  const bool keep = out && *out;
  const fs::path root = keep ? fs::path(out) : scratch_dir("sample");
  fs::create_directories(root / "ckpt");
  TensorBoardWriter writer((root / "tb").string());
  std::ofstream metrics(root / "ckpt" / "metrics.jsonl");
  metrics.precision(17);
  for (int k = 1; k <= 5; ++k) {
    const int64_t step = 20 * k;
    const double loss = 2.302585 / (1.0 + 0.37 * k), accuracy = 0.1 + 0.15 * k, lr = 0.02, sps = 5000.0 + 17.3 * k,
                 ms0 = 10.0 + k, ms1 = 11.5 + k;
    writer.add_scalar("train/loss", step, loss);
    writer.add_scalar("train/accuracy", step, accuracy);
    writer.add_scalar("train/learning_rate", step, lr);
    writer.add_scalar("train/samples_per_s", step, sps);
    writer.add_scalar("step_time_ms/rank0", step, ms0);
    writer.add_scalar("step_time_ms/rank1", step, ms1);
    metrics << "{\"step\":" << step << ",\"loss\":" << loss << ",\"accuracy\":" << accuracy << ",\"lr\":" << lr
            << ",\"samples_per_s\":" << sps << ",\"rank_step_ms\":[" << ms0 << "," << ms1 << "]}\n";
  }
  writer.flush();
  metrics.close();
  const auto records = read_records(slurp(writer.path()));
  EXPECT_EQ(records.size(), 1u + 5 * 6);
  if (keep)
    std::cout << "wrote " << writer.path() << "\n";
  else
    fs::remove_all(root);
}
