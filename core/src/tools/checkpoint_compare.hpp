#pragma once
// Compares the parameters of two checkpoints: bit for bit, or within a relative tolerance.
#include <iosfwd>
#include <string>

namespace mgt {

// Prints one line per parameter (max |a-b|, and |a-b| relative to the tensor's max |a|) and a
// verdict. Returns true when every parameter matches: bitwise for rtol == 0, otherwise
// max|a-b| <= rtol * max|a| for each tensor. Differing names or shapes never match.
bool compare_checkpoints(const std::string& a, const std::string& b, double rtol, std::ostream& out);

}  // namespace mgt
