#pragma once
// Writes PNG and JPEG files for the image-folder tests, with libpng and libjpeg themselves.
#include <png.h>
// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mgt::test_images {

// Interleaved 8-bit pixels: channels 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA).
inline void write_png(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& px,
                      bool sixteen_bit = false) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw std::runtime_error("writing " + path + " failed");
  }
  png_init_io(png, f);
  const int type = channels == 1   ? PNG_COLOR_TYPE_GRAY
                   : channels == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA
                   : channels == 3 ? PNG_COLOR_TYPE_RGB
                                   : PNG_COLOR_TYPE_RGB_ALPHA;
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), sixteen_bit ? 16 : 8, type,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t stride = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> row(stride * (sixteen_bit ? 2 : 1));
  for (int y = 0; y < height; ++y) {
    for (size_t i = 0; i < stride; ++i) {
      const uint8_t v = px[static_cast<size_t>(y) * stride + i];
      if (sixteen_bit) {
        row[2 * i] = v;  // big-endian: v * 257
        row[2 * i + 1] = v;
      } else {
        row[i] = v;
      }
    }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

// channels 1 (grey), 3 (RGB) or 4 (CMYK, written as Adobe does, inverted).
inline void write_jpeg(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& px,
                       int quality = 95) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> row(stride);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = px.data() + cinfo.next_scanline * stride;
    row.assign(src, src + stride);
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

// A smooth pattern that differs by seed: a gradient in each channel with a seed-dependent base.
inline std::vector<uint8_t> pattern(int width, int height, int channels, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        px[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>((seed * 53 + c * 80 + x * 3 + y * 2) % 256);
  return px;
}

}  // namespace mgt::test_images
