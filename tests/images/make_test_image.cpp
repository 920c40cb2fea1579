// Writes one test image: make_test_image FILE WIDTH HEIGHT MODE SEED, MODE one of grey, rgb, rgba,
// rgb16 (PNG) or grey, rgb, cmyk (JPEG); the format follows FILE's extension (.png, .jpg).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "image_files.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: make_test_image FILE WIDTH HEIGHT grey|rgb|rgba|rgb16|cmyk SEED\n");
    return 2;
  }
  const std::string file = argv[1], mode = argv[4];
  const int w = std::atoi(argv[2]), h = std::atoi(argv[3]), seed = std::atoi(argv[5]);
  const int channels = mode == "grey" ? 1 : mode == "rgba" || mode == "cmyk" ? 4 : 3;
  const auto px = mgt::test_images::pattern(w, h, channels, seed);
  try {
    if (file.size() > 4 && file.compare(file.size() - 4, 4, ".png") == 0)
      mgt::test_images::write_png(file, w, h, channels, px, mode == "rgb16");
    else
      mgt::test_images::write_jpeg(file, w, h, channels, px);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_image: %s\n", e.what());
    return 1;
  }
  return 0;
}
