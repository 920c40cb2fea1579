// What the data reader costs: rows/s of a thread reading batches of 128 (datasets/sharded_reader.hpp),
// through HDF5, straight from the file and from memory, each without augmentation and with
// flips, crops and both (medians of 5 passes of 100 batches).
// Build and run: benchmarks/reader_rows.sh [FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "datasets/sharded_reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: reader_rows FILE.h5 (a dataset of images, [N, C, H, W])\n");
    return 2;
  }
  using namespace mgt::data;
  try {
    for (const char* from : {"hdf5", "direct", "in_memory"})
      for (const char* spec : {"", "flip", "crop:4", "crop:4,flip"}) {
        ReaderOptions o;
        o.path = argv[1];
        o.global_batch = 128;
        o.seed = 1;
        o.in_memory = std::string(from) == "in_memory";
        o.read_mode = std::string(from) == "hdf5" ? ReadMode::Runs : ReadMode::Direct;
        o.augment = parse_augmentation(spec);
        ShardedReader reader(o);
        std::vector<double> rates;
        for (int pass = 0; pass < 5; ++pass) {
          reader.start(pass, 0);
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 100; ++i) reader.next();
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          rates.push_back(100 * 128 / s);
        }
        std::sort(rates.begin(), rates.end());
        std::printf("reader %-9s augment %-12s %10.0f rows/s (median of 5)\n", from, *spec ? spec : "off", rates[2]);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reader_rows: %s\n", e.what());
    return 1;
  }
  return 0;
}
