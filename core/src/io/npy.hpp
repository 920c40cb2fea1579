#pragma once
// NumPy's .npy format (version 1.0), which numpy.load reads: a header naming the element type and
// shape, then the values in C order.
#include <string>

#include "mgtrain/tensor.hpp"

namespace mgt {

// The bytes of a .npy file holding `values` (little-endian float32) of shape `shape`.
std::string npy_float32(const float* values, const Shape& shape);

}  // namespace mgt
