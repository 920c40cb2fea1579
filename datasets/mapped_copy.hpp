#pragma once
// Copies out of a read-only file mapping that survive the file being cut short under it.
#include <cstddef>

namespace mgt::data {

// Installs the SIGBUS handler copy_from_mapping relies on, unless it is already the one in place;
// the handler installed before it (Open MPI's, which prints a backtrace) still gets every SIGBUS
// outside a copy. Call after MPI_Init and before mapping a file; safe to call again.
void prepare_mapped_copies();

// `bytes` from `from`, inside a mapping of a file, into `to`: false, instead of a SIGBUS, where a
// page of `from` is past the file's end (the file was truncated while mapped). The guard is the
// calling thread's own, so it holds on any thread and in a fiber that runs on one.
bool copy_from_mapping(void* to, const void* from, size_t bytes);

}  // namespace mgt::data
