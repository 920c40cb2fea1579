#pragma once
// Decoding PNG and JPEG files (libpng, libjpeg-turbo) and fitting them to a fixed size, for
// `mgtrain data convert --image-folder`.
#include <cstdint>
#include <string>
#include <vector>

namespace mgt::data {

// An 8-bit image, interleaved: pixels[(y * width + x) * channels + c], channels 1 (grey) or 3 (RGB).
struct Image {
  int64_t width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;
};

// Thrown for a file that is no image this module can read; what() is the reason alone ("16-bit PNG
// is not supported ..."), the caller names the file.
struct BadImage : std::exception {
  explicit BadImage(std::string why) : reason(std::move(why)) {}
  const char* what() const noexcept override { return reason.c_str(); }
  std::string reason;
};

// Larger images are refused rather than decoded: one such file would need gigabytes.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// Decodes a PNG or JPEG file, told apart by their first bytes (not the file name). Grey (and grey
// with alpha) gives 1 channel, colour 3; an alpha channel is dropped, as PIL's convert("RGB")
// does, and palette images become RGB. Throws BadImage for anything else: an unreadable, empty,
// corrupt or truncated file (libjpeg's warnings, such as a premature end of data, count as
// errors), a CMYK or YCCK JPEG, a 16-bit PNG, or more than kMaxImagePixels pixels.
Image decode_image(const std::string& path);

// Scales the image, keeping its aspect ratio, to the smallest size that covers height x width,
// then keeps the middle height x width (torchvision's Resize + CenterCrop; for a square target,
// Resize(size) + CenterCrop(size)). Resampling is a triangle (bilinear) filter widened by the
// scale factor when shrinking, so every source pixel contributes (PIL's antialiased bilinear).
// The channel count is then made `channels`: grey is repeated into R, G and B; colour becomes grey
// as 0.299 R + 0.587 G + 0.114 B (PIL's convert("L")). The result is planar, [C, H, W].
std::vector<uint8_t> fit_image(const Image& image, int64_t height, int64_t width, int channels);

}  // namespace mgt::data
