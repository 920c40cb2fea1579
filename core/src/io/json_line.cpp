#include "io/json_line.hpp"

#include <charconv>
#include <cmath>

#include "kernels/gpu_runtime.hpp"

namespace mgt {

namespace {

// Rounds through the decimal text printf would print (locale-independent), then back to a double,
// which nlohmann/json prints as its shortest round-trip form: the same digits.
JsonValue rounded(double value, std::chars_format format, int precision) {
  if (!std::isfinite(value)) return nullptr;
  char text[512];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value, format, precision);
  double r = value;
  if (ec == std::errc()) std::from_chars(text, end, r);
  // JSON has one kind of number: a whole one prints without ".0", as printf printed it.
  if (std::fabs(r) < 0x1p53 && r == std::trunc(r)) return static_cast<int64_t>(r);
  return r;
}

}  // namespace

JsonValue json_significant(double value, int digits) { return rounded(value, std::chars_format::general, digits); }

JsonValue json_fixed(double value, int decimals) { return rounded(value, std::chars_format::fixed, decimals); }

std::string json_line(const JsonValue& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

JsonValue gpu_sample_json(const GpuSample& sample) {
  if (!sample.valid) return nullptr;
  JsonValue o;
  o["util"] = json_fixed(sample.util_percent, 1);
  o["mem_used_mb"] = json_fixed(sample.memory_used_mb, 1);
  o["mem_total_mb"] = json_fixed(sample.memory_total_mb, 1);
  o["temp_c"] = json_fixed(sample.temperature_c, 1);
  return o;
}

}  // namespace mgt
