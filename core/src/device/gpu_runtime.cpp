#include "device/gpu_runtime.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <mutex>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

using CountFn = int(char* why, size_t why_size);
using OpenFn = GpuRuntime*(int device);

// The library stays loaded for the life of the process, like the plugins.
struct GpuLibrary {
  boost::dll::shared_library library;
  std::string error;  // why it is not loaded
};

GpuLibrary& gpu_library() {
  static GpuLibrary lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const boost::dll::fs::path path = boost::dll::this_line_location().parent_path() / MGTRAIN_GPU_LIBRARY;
    boost::dll::fs::error_code ec;
    lib.library.load(path, boost::dll::load_mode::rtld_lazy, ec);
    if (ec) {
      lib.error = "the GPU library " + path.string() + " could not be loaded (" + ec.message() +
                  "; this mgtrain was built without CUDA, or the CUDA libraries are not on the library path)";
      return;
    }
    for (const char* symbol : {MGTRAIN_GPU_COUNT_SYMBOL, MGTRAIN_GPU_OPEN_SYMBOL}) {
      if (!lib.library.has(symbol)) {
        lib.error = "the GPU library " + path.string() + " lacks the symbol " + symbol;
        lib.library.unload();
        return;
      }
    }
  });
  return lib;
}

}  // namespace

int visible_gpus(std::string* why) {
  GpuLibrary& lib = gpu_library();
  if (!lib.library.is_loaded()) {
    if (why) *why = lib.error;
    return 0;
  }
  char reason[512] = {};
  const int n = lib.library.get<CountFn>(MGTRAIN_GPU_COUNT_SYMBOL)(reason, sizeof(reason));
  if (why) *why = reason;
  return n;
}

std::unique_ptr<GpuRuntime> open_gpu_runtime(int device) {
  GpuLibrary& lib = gpu_library();
  MGT_CHECK(lib.library.is_loaded(), ConfigError, "train.device = gpu: " + lib.error);
  return std::unique_ptr<GpuRuntime>(lib.library.get<OpenFn>(MGTRAIN_GPU_OPEN_SYMBOL)(device));
}

}  // namespace mgt
