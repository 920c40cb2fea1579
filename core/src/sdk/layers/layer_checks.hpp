#pragma once
// The checks and shape arithmetic the SDK layers share.
#include <cstdint>
#include <string>

#include "mgtrain/error.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::layers {

inline void check_positive(const std::string& layer, const char* what, int64_t value) {
  MGT_CHECK(value > 0, ConfigError,
            "layer '" + layer + "': " + what + " must be positive, got " + std::to_string(value));
}

// Elements per row of a batch-first shape.
inline int64_t row_size(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

// A layer run over an input other than the one it was planned for would read or write past its
// buffers: a plugin's Model that drives layers itself must plan them for each new shape.
inline void check_planned(const std::string& layer, const Shape& planned, const Shape& input) {
  MGT_CHECK(planned == input, Error,
            "layer '" + layer + "' was planned for input " + shape_string(planned) + " but runs on " +
                shape_string(input) + " (Layer::plan before forward on a new shape)");
}

// The output of k x k windows at `stride` over [B, C, H, W], no padding (the pooling layers).
inline Shape pool_output_shape(const std::string& layer, const Shape& input, int64_t kernel, int64_t stride) {
  MGT_CHECK(input.size() == 4 && input[2] >= kernel && input[3] >= kernel, ConfigError,
            "layer '" + layer + "' expects input [B, C, H, W] with H, W >= " + std::to_string(kernel) + ", got " +
                shape_string(input));
  return {input[0], input[1], (input[2] - kernel) / stride + 1, (input[3] - kernel) / stride + 1};
}

}  // namespace mgt::layers
