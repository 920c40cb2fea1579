// PNG/JPEG decoding, resizing and centre-cropping, bad images, and `data convert --image-folder`.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "datasets/convert.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/image_decode.hpp"
#include "images/image_files.hpp"
#include "mgtrain/error.hpp"

namespace fs = std::filesystem;
using namespace mgt;
using namespace mgt::data;
using namespace mgt::test_images;

namespace {

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mgt_images_" + std::string(t->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The first `keep` bytes of a file, as a truncated copy.
  void truncate_copy(const std::string& from, const std::string& to, size_t keep) {
    std::ifstream in(from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(to, std::ios::binary) << bytes.substr(0, keep);
  }

  std::string bad_reason(const std::string& file) {
    try {
      decode_image(file);
    } catch (const BadImage& e) {
      return e.reason;
    }
    return "decoded";
  }

  // DIR/<class>/<i>.png: `per_class` 40x30 colour images per class.
  std::string make_folder(const std::vector<std::string>& classes, int per_class) {
    const std::string root = path("folder");
    for (size_t c = 0; c < classes.size(); ++c) {
      fs::create_directories(root + "/" + classes[c]);
      for (int i = 0; i < per_class; ++i)
        write_png(root + "/" + classes[c] + "/" + std::to_string(i) + ".png", 40, 30, 3,
                  pattern(40, 30, 3, static_cast<int>(c) * 10 + i));
    }
    return root;
  }

  fs::path dir_;
};

// The values of a numeric attribute of /x, as written.
std::vector<double> x_attr(const std::string& file, const char* name) {
  std::lock_guard lock(hdf5_mutex());
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t x = H5Dopen2(f, "/x", H5P_DEFAULT);
  std::vector<double> values;
  h5::read_attr_doubles(x, name, values);
  H5Dclose(x);
  H5Fclose(f);
  return values;
}

std::vector<uint8_t> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(ImageFolderTest, DecodesPngExactlyAndDropsAlpha) {
  const auto rgb = pattern(7, 5, 3, 1);
  write_png(path("rgb.png"), 7, 5, 3, rgb);
  Image a = decode_image(path("rgb.png"));
  EXPECT_EQ(a.width, 7);
  EXPECT_EQ(a.height, 5);
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.pixels, rgb);

  auto rgba = pattern(7, 5, 4, 1);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = 10;  // mostly transparent
  write_png(path("rgba.png"), 7, 5, 4, rgba);
  Image b = decode_image(path("rgba.png"));
  ASSERT_EQ(b.channels, 3);
  for (size_t i = 0; i < 35; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(b.pixels[i * 3 + c], rgba[i * 4 + c]);  // not composited

  const auto grey = pattern(6, 4, 1, 2);
  write_png(path("grey.png"), 6, 4, 1, grey);
  Image g = decode_image(path("grey.png"));
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, grey);
}

TEST_F(ImageFolderTest, DecodesJpegByContentNotName) {
  std::vector<uint8_t> rgb;  // smooth: JPEG keeps it within a few levels
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) rgb.push_back(static_cast<uint8_t>(40 + 4 * x + 3 * y + 30 * c));
  write_jpeg(path("photo.png"), 16, 8, 3, rgb, 100);  // a JPEG named .png
  Image a = decode_image(path("photo.png"));
  EXPECT_EQ(a.channels, 3);
  ASSERT_EQ(a.pixels.size(), rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i) EXPECT_NEAR(a.pixels[i], rgb[i], 12) << i;
  write_jpeg(path("grey.jpg"), 8, 8, 1, pattern(8, 8, 1, 0));
  EXPECT_EQ(decode_image(path("grey.jpg")).channels, 1);
}

TEST_F(ImageFolderTest, NamesWhyAnImageIsBad) {
  write_jpeg(path("cmyk.jpg"), 8, 8, 4, pattern(8, 8, 4, 0));
  EXPECT_EQ(bad_reason(path("cmyk.jpg")), "is a CMYK JPEG, which is not supported (convert it to RGB or greyscale)");

  write_png(path("deep.png"), 8, 8, 3, pattern(8, 8, 3, 0), true);
  EXPECT_EQ(bad_reason(path("deep.png")), "is a 16-bit PNG, which is not supported (convert it to 8 bits per channel)");

  write_png(path("whole.png"), 40, 30, 3, pattern(40, 30, 3, 0));
  truncate_copy(path("whole.png"), path("cut.png"), fs::file_size(path("whole.png")) / 2);
  EXPECT_EQ(bad_reason(path("cut.png")).rfind("is a corrupt or truncated PNG: ", 0), 0u) << bad_reason(path("cut.png"));

  write_jpeg(path("whole.jpg"), 40, 30, 3, pattern(40, 30, 3, 0));
  truncate_copy(path("whole.jpg"), path("cut.jpg"), fs::file_size(path("whole.jpg")) / 2);
  EXPECT_EQ(bad_reason(path("cut.jpg")), "is a corrupt or truncated JPEG: Premature end of JPEG file");

  std::ofstream(path("text.jpg")) << "hello";
  EXPECT_EQ(bad_reason(path("text.jpg")), "is neither PNG nor JPEG (its first bytes are 0x68 0x65 0x6c)");
  std::ofstream(path("empty.png")).close();
  EXPECT_EQ(bad_reason(path("empty.png")), "is empty (0 bytes)");
  EXPECT_EQ(bad_reason(path("missing.png")), "cannot be opened: No such file or directory");
}

TEST_F(ImageFolderTest, FitKeepsAspectAndCropsTheMiddle) {
  // 60x20: red, green and blue thirds. Scaled to 60x20 covers 20x20; the middle is all green.
  Image wide{60, 20, 3, std::vector<uint8_t>(60 * 20 * 3, 0)};
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 60; ++x) wide.pixels[(y * 60 + x) * 3 + x / 20] = 200;
  const auto out = fit_image(wide, 20, 20, 3);
  ASSERT_EQ(out.size(), 3u * 400);
  for (int i = 0; i < 400; ++i) {
    EXPECT_EQ(out[i], 0) << i;          // R plane
    EXPECT_EQ(out[400 + i], 200) << i;  // G plane
    EXPECT_EQ(out[800 + i], 0) << i;    // B plane
  }
  // Shrunk by 2 (120x40 to 20x20 via 60x20): the middle is still all green.
  Image big{120, 40, 3, std::vector<uint8_t>(120 * 40 * 3, 0)};
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 120; ++x) big.pixels[(y * 120 + x) * 3 + x / 40] = 200;
  const auto half = fit_image(big, 10, 10, 3);
  // The filter, 4 source pixels wide per side when shrinking by 4, reaches the red and blue thirds
  // only from the outermost kept columns.
  for (int y = 0; y < 10; ++y)
    for (int x = 1; x < 9; ++x) {
      EXPECT_EQ(half[100 + y * 10 + x], 200) << x;
      EXPECT_EQ(half[y * 10 + x], 0) << x;
    }

  // The same size is the same pixels, made planar.
  Image same{5, 4, 3, pattern(5, 4, 3, 7)};
  const auto planar = fit_image(same, 4, 5, 3);
  for (int i = 0; i < 20; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(planar[c * 20 + i], same.pixels[i * 3 + c]);

  // A constant image stays constant at any size, enlarged or shrunk.
  Image flat{7, 3, 1, std::vector<uint8_t>(21, 77)};
  for (const auto& v : fit_image(flat, 16, 9, 1)) EXPECT_EQ(v, 77);
}

TEST_F(ImageFolderTest, ConvertsChannels) {
  Image grey{2, 1, 1, {10, 250}};
  EXPECT_EQ(fit_image(grey, 1, 2, 3), (std::vector<uint8_t>{10, 250, 10, 250, 10, 250}));
  Image rgb{1, 1, 3, {255, 0, 0}};
  EXPECT_EQ(fit_image(rgb, 1, 1, 1), (std::vector<uint8_t>{76}));  // 0.299 * 255
}

TEST_F(ImageFolderTest, ConvertsAFolderWithPerChannelMoments) {
  const std::string root = make_folder({"zebra", "ant", "Bee"}, 3);
  write_png(root + "/ant/grey.png", 30, 40, 1, pattern(30, 40, 1, 5));  // grey in a colour folder
  std::ofstream(root + "/README.txt") << "not a class";
  std::ofstream(root + "/ant/notes.txt") << "not an image";
  ImageFolderOptions options;
  options.height = options.width = 16;
  const auto summary = convert_image_folder(root, path("out.h5"), options, [](const std::string&) { FAIL(); });
  EXPECT_EQ(summary.images, 10);
  EXPECT_EQ(summary.channels, 3);
  EXPECT_EQ(summary.ignored, 2);
  // Byte order, as Python's sorted(): upper case first.
  EXPECT_EQ(summary.class_names, (std::vector<std::string>{"Bee", "ant", "zebra"}));

  const DatasetInfo info = open_dataset_info(path("out.h5"));
  EXPECT_EQ(info.sample_shape, (Shape{3, 16, 16}));
  EXPECT_EQ(info.x_type, "uint8");
  EXPECT_EQ(info.num_classes, 3);
  EXPECT_EQ(info.class_names, summary.class_names);
  EXPECT_TRUE(info.row_checksums);
  ASSERT_EQ(info.channel_mean.size(), 3u);
  ASSERT_EQ(info.channel_std.size(), 3u);
  EXPECT_NE(info.channel_mean[0], info.channel_mean[1]);  // the pattern differs by channel
  const auto mean = x_attr(path("out.h5"), "mean"), sd = x_attr(path("out.h5"), "std");
  ASSERT_EQ(mean.size(), 3u);
  ASSERT_EQ(sd.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(static_cast<float>(mean[c]), info.channel_mean[c]);
    EXPECT_GT(mean[c], 0.0);
    EXPECT_LT(mean[c], 1.0);  // of pixels scaled to [0, 1]
    EXPECT_GT(sd[c], 0.0);
  }
  EXPECT_EQ(class_counts(info), (std::vector<int64_t>{3, 4, 3}));

  // The same folder gives the same bytes.
  convert_image_folder(root, path("again.h5"), options, [](const std::string&) {});
  EXPECT_EQ(read_bytes(path("out.h5")), read_bytes(path("again.h5")));

  // --channels 1: one plane, one mean.
  options.channels = 1;
  convert_image_folder(root, path("grey.h5"), options, [](const std::string&) {});
  const DatasetInfo g = open_dataset_info(path("grey.h5"));
  EXPECT_EQ(g.sample_shape, (Shape{1, 16, 16}));
  EXPECT_EQ(x_attr(path("grey.h5"), "mean").size(), 1u);
  EXPECT_EQ(x_attr(path("grey.h5"), "std").size(), 1u);
}

TEST_F(ImageFolderTest, MeanAndStdArePerChannel) {
  const std::string root = path("solid");
  fs::create_directories(root + "/a");
  auto solid = [](uint8_t r, uint8_t g, uint8_t b) {
    std::vector<uint8_t> px;
    for (int i = 0; i < 8 * 6; ++i) px.insert(px.end(), {r, g, b});
    return px;
  };
  // 3 images of 4x4: 48 values per channel, where 121 is a value whose variance rounding once
  // made 1e-10 instead of 0.
  write_png(root + "/a/1.png", 8, 6, 3, solid(255, 0, 121));
  write_png(root + "/a/2.png", 8, 6, 3, solid(0, 0, 121));
  write_png(root + "/a/3.png", 8, 6, 3, solid(255, 0, 121));
  ImageFolderOptions options;
  options.height = options.width = 4;
  convert_image_folder(root, path("out.h5"), options, [](const std::string&) {});
  const auto mean = x_attr(path("out.h5"), "mean"), sd = x_attr(path("out.h5"), "std");
  ASSERT_EQ(mean.size(), 3u);
  EXPECT_FLOAT_EQ(mean[0], 2.0f / 3);
  EXPECT_FLOAT_EQ(mean[1], 0.0f);
  EXPECT_FLOAT_EQ(mean[2], 121.0f / 255);
  EXPECT_FLOAT_EQ(sd[0], std::sqrt(2.0f) / 3);
  EXPECT_FLOAT_EQ(sd[1], 1.0f);  // a constant channel is left centred, never divided by zero
  EXPECT_FLOAT_EQ(sd[2], 1.0f);
}

TEST_F(ImageFolderTest, BadImageStopsOrIsSkipped) {
  const std::string root = make_folder({"a", "b"}, 2);
  std::ofstream(root + "/b/broken.jpg") << "not really";
  write_jpeg(root + "/a/cmyk.jpg", 8, 8, 4, pattern(8, 8, 4, 0));
  ImageFolderOptions options;
  options.height = options.width = 8;
  try {
    convert_image_folder(root, path("out.h5"), options, [](const std::string&) {});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "image folder '" + root + "': image '" + root +
                                         "/a/cmyk.jpg' is a CMYK JPEG, which is not supported (convert it to RGB or "
                                         "greyscale) (--bad-images skip leaves bad images out)");
  }
  EXPECT_FALSE(fs::exists(path("out.h5")));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".out.h5"), std::string::npos);

  options.bad_images = BadImages::skip;
  std::ofstream(root + "/b/old.bmp") << "BM";   // a format torchvision reads: named, not dropped
  std::ofstream(root + "/b/.DS_Store") << "x";  // hidden: ignored
  std::vector<std::string> warnings;
  const auto s =
      convert_image_folder(root, path("out.h5"), options, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(s.images, 4);
  EXPECT_EQ(s.skipped, 3);
  EXPECT_EQ(s.ignored, 0);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[1],
            "image '" + root + "/b/broken.jpg' is neither PNG nor JPEG (its first bytes are 0x6e 0x6f 0x74); skipped");
  EXPECT_EQ(warnings[2], "image '" + root + "/b/old.bmp' is a bmp file; only PNG and JPEG are supported; skipped");
  EXPECT_EQ(open_dataset_info(path("out.h5")).num_samples, 4);
}

TEST_F(ImageFolderTest, RefusesAFolderWithoutClassesOrAClassWithoutImages) {
  const std::string root = make_folder({"a"}, 1);
  fs::create_directories(root + "/empty");
  ImageFolderOptions options;
  options.height = options.width = 8;
  EXPECT_THROW(
      {
        try {
          convert_image_folder(root, path("out.h5"), options, [](const std::string&) {});
        } catch (const DataError& e) {
          EXPECT_NE(std::string(e.what()).find("class folder '" + root + "/empty' has no usable PNG or JPEG images"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      DataError);
  fs::create_directories(path("flat"));
  EXPECT_THROW(convert_image_folder(path("flat"), path("out.h5"), options, [](const std::string&) {}), DataError);
}

}  // namespace
