// PNG (libpng's simplified API) and JPEG (libjpeg-turbo) decoding, resizing and centre-cropping.
#include "datasets/image_decode.hpp"

#include <png.h>
// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <fstream>

#include "datasets/regular_file.hpp"

namespace mgt::data {

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  if (const std::string kind = non_regular_kind(path); !kind.empty())
    throw BadImage("is " + kind + ", not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadImage(std::string("cannot be opened: ") + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw BadImage(std::string("cannot be read: ") + std::strerror(errno));
  return bytes;
}

void check_size(int64_t width, int64_t height) {
  if (width < 1 || height < 1)
    throw BadImage("has no pixels (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  if (width * height > kMaxImagePixels)
    throw BadImage("is " + std::to_string(width) + "x" + std::to_string(height) + " pixels, more than the limit of " +
                   std::to_string(kMaxImagePixels) + " pixels");
}

Image decode_png(const std::vector<uint8_t>& bytes) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    throw BadImage(std::string("is not a readable PNG: ") + png.message);
  // 16-bit samples would reach 8 bits through libpng's linear-to-sRGB gamma curve, which no other
  // tool (PIL, torchvision) applies: refused rather than silently different.
  if (png.format & PNG_FORMAT_FLAG_LINEAR) {
    png_image_free(&png);
    throw BadImage("is a 16-bit PNG, which is not supported (convert it to 8 bits per channel)");
  }
  try {
    check_size(png.width, png.height);
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  const bool colour = png.format & PNG_FORMAT_FLAG_COLOR;
  // Read with alpha, then drop it: without, libpng would composite onto a background colour.
  png.format = colour ? PNG_FORMAT_RGBA : PNG_FORMAT_GA;
  const int channels = colour ? 3 : 1, stored = channels + 1;
  const size_t count = static_cast<size_t>(png.width) * png.height;
  std::vector<uint8_t> with_alpha(count * static_cast<size_t>(stored));
  if (!png_image_finish_read(&png, nullptr, with_alpha.data(), 0, nullptr))
    throw BadImage(std::string("is a corrupt or truncated PNG: ") + png.message);
  Image image{png.width, png.height, channels, std::vector<uint8_t>(count * static_cast<size_t>(channels))};
  for (size_t i = 0; i < count; ++i)
    for (int c = 0; c < channels; ++c) image.pixels[i * channels + c] = with_alpha[i * stored + c];
  return image;
}

// libjpeg reports errors through error_exit and longjmp; its warnings (corrupt data, a premature
// end of file, which it would otherwise fill with grey) are errors here too.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);  // a warning; trace messages (level >= 0) are ignored
}

const char* jpeg_colour_space_name(J_COLOR_SPACE space) {
  switch (space) {
    case JCS_CMYK:
      return "CMYK";
    case JCS_YCCK:
      return "YCCK (CMYK)";
    default:
      return "unknown";
  }
}

// The libjpeg calls, with setjmp here and every result written through references, so that no
// local is modified between setjmp and a longjmp. Returns false on a libjpeg error (err.message).
bool run_jpeg(jpeg_decompress_struct& cinfo, JpegError& err, const std::vector<uint8_t>& bytes, Image& image,
              J_COLOR_SPACE& space) {
  if (setjmp(err.jump)) return false;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  space = cinfo.jpeg_color_space;
  image.width = cinfo.image_width;
  image.height = cinfo.image_height;
  if (space == JCS_GRAYSCALE)
    cinfo.out_color_space = JCS_GRAYSCALE;
  else if (space == JCS_YCbCr || space == JCS_RGB)
    cinfo.out_color_space = JCS_RGB;
  else
    return true;  // refused by the caller
  if (image.width * image.height > kMaxImagePixels) return true;
  jpeg_start_decompress(&cinfo);
  image.width = cinfo.output_width;
  image.height = cinfo.output_height;
  image.channels = cinfo.output_components;
  const size_t stride = static_cast<size_t>(image.width) * static_cast<size_t>(image.channels);
  image.pixels.resize(stride * static_cast<size_t>(image.height));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = image.pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

Image decode_jpeg(const std::vector<uint8_t>& bytes) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_message;
  jpeg_create_decompress(&cinfo);
  Image image;
  J_COLOR_SPACE space = JCS_UNKNOWN;
  const bool ok = run_jpeg(cinfo, err, bytes, image, space);
  jpeg_destroy_decompress(&cinfo);
  if (!ok) throw BadImage(std::string("is a corrupt or truncated JPEG: ") + err.message);
  if (image.channels == 0 && space != JCS_GRAYSCALE && space != JCS_YCbCr && space != JCS_RGB)
    throw BadImage(std::string("is a ") + jpeg_colour_space_name(space) +
                   " JPEG, which is not supported (convert it to RGB or greyscale)");
  check_size(image.width, image.height);
  return image;
}

// One axis of a separable resize: for each output index, the first input index and the weights.
struct Taps {
  std::vector<int64_t> first;
  std::vector<std::vector<double>> weights;
};

// PIL's bilinear resampling: a triangle of half-width 1 output pixel (or 1 input pixel when
// enlarging) around each output pixel's centre, normalised.
Taps resample_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double widen = std::max(scale, 1.0), support = widen;
  Taps taps;
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(centre - support + 0.5));
    const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(centre + support + 0.5));
    std::vector<double> w;
    double total = 0;
    for (int64_t x = lo; x < hi; ++x) {
      const double d = std::fabs((static_cast<double>(x) - centre + 0.5) / widen);
      w.push_back(d < 1 ? 1 - d : 0);
      total += w.back();
    }
    if (total > 0)
      for (double& v : w) v /= total;
    taps.first.push_back(lo);
    taps.weights.push_back(std::move(w));
  }
  return taps;
}

uint8_t to_u8(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

Image decode_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  if (bytes.empty()) throw BadImage("is empty (0 bytes)");
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::equal(png_magic, png_magic + 8, bytes.begin())) return decode_png(bytes);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return decode_jpeg(bytes);
  char first[40];
  std::snprintf(first, sizeof(first), "0x%02x 0x%02x 0x%02x", bytes[0], bytes.size() > 1 ? bytes[1] : 0,
                bytes.size() > 2 ? bytes[2] : 0);
  throw BadImage(std::string("is neither PNG nor JPEG (its first bytes are ") + first + ")");
}

std::vector<uint8_t> fit_image(const Image& image, int64_t height, int64_t width, int channels) {
  const int64_t h = image.height, w = image.width;
  const int ch = image.channels;
  // The smallest size with the image's aspect ratio that covers height x width.
  int64_t rh = height, rw = width;
  if (w * height >= h * width)  // relatively wider than the target: the heights match
    rw = std::max<int64_t>(width, static_cast<int64_t>(static_cast<double>(w) * height / h));
  else
    rh = std::max<int64_t>(height, static_cast<int64_t>(static_cast<double>(h) * width / w));
  const int64_t top = std::lround((rh - height) / 2.0), left = std::lround((rw - width) / 2.0);

  // Horizontal pass over every source row for the kept columns, then vertical for the kept rows.
  const Taps tx = resample_taps(w, rw), ty = resample_taps(h, rh);
  std::vector<double> wide(static_cast<size_t>(h * width * ch));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const auto& wt = tx.weights[static_cast<size_t>(left + x)];
      const int64_t x0 = tx.first[static_cast<size_t>(left + x)];
      for (int c = 0; c < ch; ++c) {
        double v = 0;
        for (size_t k = 0; k < wt.size(); ++k)
          v += wt[k] * image.pixels[static_cast<size_t>((y * w + x0 + static_cast<int64_t>(k)) * ch + c)];
        wide[static_cast<size_t>((y * width + x) * ch + c)] = v;
      }
    }
  std::vector<double> fitted(static_cast<size_t>(height * width * ch));
  for (int64_t y = 0; y < height; ++y) {
    const auto& wt = ty.weights[static_cast<size_t>(top + y)];
    const int64_t y0 = ty.first[static_cast<size_t>(top + y)];
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < ch; ++c) {
        double v = 0;
        for (size_t k = 0; k < wt.size(); ++k)
          v += wt[k] * wide[static_cast<size_t>(((y0 + static_cast<int64_t>(k)) * width + x) * ch + c)];
        fitted[static_cast<size_t>((y * width + x) * ch + c)] = v;
      }
  }

  // Planar [C, H, W] with the requested channel count.
  const size_t plane = static_cast<size_t>(height * width);
  std::vector<uint8_t> out(plane * static_cast<size_t>(channels));
  for (size_t i = 0; i < plane; ++i) {
    const double* px = &fitted[i * static_cast<size_t>(ch)];
    if (channels == ch) {
      for (int c = 0; c < ch; ++c) out[static_cast<size_t>(c) * plane + i] = to_u8(px[c]);
    } else if (channels == 3) {  // grey to RGB
      for (int c = 0; c < 3; ++c) out[static_cast<size_t>(c) * plane + i] = to_u8(px[0]);
    } else {  // RGB to grey
      out[i] = to_u8(0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]);
    }
  }
  return out;
}

}  // namespace mgt::data
