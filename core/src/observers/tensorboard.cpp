#include "observers/tensorboard.hpp"

#include <unistd.h>

#include <boost/crc.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/host_name.hpp"
#include "io/append_file.hpp"
#include "mgtrain/error.hpp"

namespace mgt {
namespace {

// Protobuf wire encoding, just what Event needs.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}
void put_fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}
void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));  // int64: negatives as 10-byte two's complement
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  // Castagnoli's polynomial, reflected in and out, all ones in and out: CRC-32C as TFRecord uses it.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, bytes);
  return crc.checksum();
}

// TFRecord's own rotation and offset: no library has it, and it is one line.
uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_fixed(out, data.size(), 8);
  put_fixed(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_fixed(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string encode_file_version_event(double wall_time, const std::string& file_version) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, file_version);
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, wall_time);
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("tensorboard: cannot create directory '" + dir + "': " + ec.message());
  const auto seconds = static_cast<long long>(now_seconds());
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." + std::to_string(getpid())))
              .string();
  file_ = std::make_unique<AppendFile>(path_, "tensorboard: event file");
  pending_ = tfrecord_frame(encode_file_version_event(now_seconds(), "brain.Event:2"));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (!pending_.empty()) file_->append(pending_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  pending_ += tfrecord_frame(encode_scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::remove_if_empty() {
  std::error_code ec;
  if (std::filesystem::file_size(path_, ec) == 0 && !ec) std::filesystem::remove(path_, ec);
}

void TensorBoardWriter::flush() {
  const std::string failure = file_->append(pending_);
  pending_.clear();
  if (!failure.empty()) throw IoError("tensorboard: cannot write event file '" + path_ + "': " + failure);
}

}  // namespace mgt
