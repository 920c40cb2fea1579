#include "base/resident_memory.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace mgt {

int64_t current_rss_kib() {
  std::ifstream statm("/proc/self/statm");
  long long pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  // ru_maxrss is in KiB on Linux.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

bool reset_peak_rss() {
  // Freed blocks in the middle of the heap stay resident until trimmed; without this the memory a
  // previous run freed would count in the next run's peak.
  malloc_trim(0);
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";  // 5: reset the peak resident set size (proc(5))
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace mgt
