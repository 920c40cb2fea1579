// libFuzzer target: the input bytes as an HDF5 data file -> data::inspect(), which runs
// open_validated (the same open and checks as the trainer's reader and `mgtrain eval`),
// class_counts and the attribute listing. A bad file must end in mgt::Error (DataError); anything
// else thrown, a sanitizer report or a crash, in mgtrain or in libhdf5 under it, is a finding.
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "datasets/hdf5_format.hpp"
#include "mgtrain/error.hpp"

namespace {

std::string g_path;

// One file per process, in memory when /dev/shm exists: the inspector takes a path, as the
// launcher does, so the input goes through HDF5's ordinary file driver.
void write_input(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(g_path.c_str(), "wb");
  if (!f) {
    std::perror(g_path.c_str());
    std::abort();
  }
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

void remove_input() { std::remove(g_path.c_str()); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("MGTRAIN_FUZZ_TMPDIR");
  if (!dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  g_path = std::string(dir) + "/mgtrain-fuzz-" + std::to_string(getpid()) + ".h5";
  std::atexit(remove_input);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  // MGTRAIN_FUZZ_PRINT=1 shows what the inspector said, to see what an input exercises.
  static const bool print = std::getenv("MGTRAIN_FUZZ_PRINT") != nullptr;
  try {
    const std::string text = mgt::data::inspect(g_path);
    if (text.empty()) std::abort();  // an accepted file always has a summary
    if (print) std::fprintf(stderr, "%s", text.c_str());
  } catch (const mgt::Error& e) {
    if (print) std::fprintf(stderr, "rejected: %s\n", e.what());
  }
  // Every HDF5 object the inspector opened must be closed again, on success and on every error
  // path: an id left open holds the file and its metadata, which LeakSanitizer cannot see because
  // HDF5's id table still points at them.
  std::lock_guard lock(mgt::data::hdf5_mutex());
  const ssize_t open_objects = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_objects != 0) {
    std::fprintf(stderr, "fuzz_dataset_inspect: %zd HDF5 objects left open\n", open_objects);
    std::abort();
  }
  return 0;
}
