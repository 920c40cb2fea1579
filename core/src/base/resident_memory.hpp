#pragma once
// This process's resident memory, from /proc/self: now, and its peak since the start or since the
// last reset_peak_rss(), so that one process running several trainings in turn (mgtrain bench:
// rank 0 alone at the global batch, then all ranks) can report the peak of each.
#include <cstdint>

namespace mgt {

// Resident memory now, in KiB; 0 where /proc is missing.
int64_t current_rss_kib();
// Peak resident memory (VmHWM) in KiB since the start or the last reset_peak_rss(); where
// /proc/self/status is missing, getrusage's ru_maxrss (which no reset lowers).
int64_t peak_rss_kib();
// Hands the heap's free pages back to the system (malloc_trim), then starts the peak over from
// the memory resident now (/proc/self/clear_refs, Linux 4.0 and later). False when the kernel
// refused the reset; the peak then still covers everything since the start.
bool reset_peak_rss();

}  // namespace mgt
