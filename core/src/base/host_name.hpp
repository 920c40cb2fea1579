#pragma once
#include <string>

namespace mgt {

// This machine's name (gethostname), or "unknown" where it has none: what messages, reports and
// file names call the node a rank runs on.
std::string host_name();

}  // namespace mgt
