#include "base/host_name.hpp"

#include <unistd.h>

namespace mgt {

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "unknown";
  return host;
}

}  // namespace mgt
