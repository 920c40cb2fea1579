// The layers' GPU element-wise and reduction kernels (kernels/cuda/layer_ops.hpp) against the CPU
// kernels: bias broadcast, column sums (bit for bit), channel sums, the softmax cross-entropy
// with its on-device loss and accuracy totals (and label smoothing), the non-finite check,
// clipping by global norm and the dropout product.
// Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/layer_ops.hpp"
#include "kernels/cuda/softmax.hpp"

namespace {

using mgt::cuda::DeviceBuffer;
using mgt::test::expect_close;
using mgt::test::random_floats;

class GpuLayerOps : public mgt::test::GpuTest {};

struct Shape {
  int64_t rows, cols;
};

std::string shape_name(const Shape& s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

// Sizes around a warp, a block and the grid cap, and a single row or column.
const std::vector<Shape> kShapes = {{1, 1}, {7, 10}, {64, 33}, {300, 257}, {1, 5000}, {2049, 3}};

TEST_F(GpuLayerOps, BroadcastRowsMatchesCpu) {
  for (const Shape s : kShapes) {
    const auto bias = random_floats(s.cols, 1);
    std::vector<float> y(s.rows * s.cols);
    mgt::kernels::broadcast_rows(bias.data(), y.data(), s.rows, s.cols);
    DeviceBuffer<float> d_bias(bias), d_y(random_floats(y.size(), 2));
    mgt::cuda::broadcast_rows(d_bias.data(), d_y.data(), s.rows, s.cols);
    mgt::cuda::synchronize();
    EXPECT_EQ(d_y.to_host(), y) << shape_name(s);
  }
}

TEST_F(GpuLayerOps, ColumnSumsMatchCpuBitForBit) {
  for (const Shape s : kShapes) {
    // Values of mixed magnitude, so another order of addition would round differently.
    auto x = random_floats(s.rows * s.cols, 3, -1.0f, 1.0f);
    for (size_t i = 0; i < x.size(); i += 5) x[i] *= 1000.0f;
    const auto start = random_floats(s.cols, 4, -100.0f, 100.0f);

    std::vector<float> acc = start;
    mgt::kernels::add_column_sums(x.data(), acc.data(), s.rows, s.cols);
    DeviceBuffer<float> d_x(x), d_out(start);
    mgt::cuda::column_sums(d_x.data(), d_out.data(), s.rows, s.cols, true);
    mgt::cuda::synchronize();
    EXPECT_EQ(d_out.to_host(), acc) << shape_name(s) << " accumulated";

    std::vector<float> fresh(s.cols, 0.0f);
    mgt::kernels::add_column_sums(x.data(), fresh.data(), s.rows, s.cols);
    d_out.upload(std::vector<float>(s.cols, std::numeric_limits<float>::quiet_NaN()).data(), s.cols);
    mgt::cuda::column_sums(d_x.data(), d_out.data(), s.rows, s.cols, false);
    mgt::cuda::synchronize();
    EXPECT_EQ(d_out.to_host(), fresh) << shape_name(s) << " overwritten";
  }
}

TEST_F(GpuLayerOps, ChannelSumsMatchAPlainSum) {
  struct Case {
    int64_t batch, channels, plane;
  };
  for (const Case c : {Case{1, 1, 1}, Case{4, 8, 784}, Case{3, 16, 49}, Case{32, 3, 1}, Case{2, 5, 1000}}) {
    const std::string what = "channel sums b" + std::to_string(c.batch) + " c" + std::to_string(c.channels) +
                             " plane " + std::to_string(c.plane);
    const auto x = random_floats(c.batch * c.channels * c.plane, 5);
    const auto start = random_floats(c.channels, 6);
    std::vector<float> fresh(c.channels), acc(c.channels);
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      double sum = 0.0;  // exact enough to judge the float sum by
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t p = 0; p < c.plane; ++p) sum += x[(b * c.channels + ch) * c.plane + p];
      fresh[ch] = static_cast<float>(sum);
      acc[ch] = static_cast<float>(sum + start[ch]);
    }
    DeviceBuffer<float> d_x(x), d_out(std::vector<float>(c.channels, std::numeric_limits<float>::quiet_NaN()));
    mgt::cuda::channel_sums(d_x.data(), d_out.data(), c.batch, c.channels, c.plane, false);
    mgt::cuda::synchronize();
    const auto first = d_out.to_host();
    expect_close(first, fresh, 1e-5, what);
    // The same inputs give the same bits: the order of addition is fixed.
    mgt::cuda::channel_sums(d_x.data(), d_out.data(), c.batch, c.channels, c.plane, false);
    mgt::cuda::synchronize();
    EXPECT_EQ(d_out.to_host(), first) << what << " repeated";

    d_out.upload(start.data(), c.channels);
    mgt::cuda::channel_sums(d_x.data(), d_out.data(), c.batch, c.channels, c.plane, true);
    mgt::cuda::synchronize();
    expect_close(d_out.to_host(), acc, 1e-5, what + " accumulated");
  }
}

// Batch norm's per-channel operations (mgt::Ops::channel_sums and channel_affine) against the CPU
// loops: the sums in double in another order, so close rather than equal; the affine form, which
// both compute without FMA, bit for bit.
TEST_F(GpuLayerOps, BatchNormChannelOpsMatchCpu) {
  const int64_t batch = 6, channels = 5, plane = 49;
  const int64_t n = batch * channels * plane;
  const auto a = random_floats(n, 21), b = random_floats(n, 22);
  const auto center = random_floats(channels, 23), scale_a = random_floats(channels, 24);
  const auto scale_b = random_floats(channels, 25), shift = random_floats(channels, 26);
  std::vector<float> cpu_sum(channels), cpu_product(channels);
  mgt::kernels::channel_sums(a.data(), b.data(), center.data(), batch, channels, plane, cpu_sum.data(),
                             cpu_product.data());
  const std::vector<float> per_channel(channels), per_element(n);
  DeviceBuffer<float> d_a(a), d_b(b), d_center(center), d_sum(per_channel), d_product(per_channel);
  mgt::cuda::channel_sum_products(d_a.data(), d_b.data(), d_center.data(), batch, channels, plane, d_sum.data(),
                                  d_product.data(), nullptr);
  mgt::cuda::synchronize();
  expect_close(d_sum.to_host(), cpu_sum, 1e-5, "channel sums");
  expect_close(d_product.to_host(), cpu_product, 1e-5, "channel sums of products");

  std::vector<float> cpu_y(n);
  mgt::kernels::channel_affine(a.data(), scale_a.data(), b.data(), scale_b.data(), shift.data(), cpu_y.data(), batch,
                               channels, plane);
  DeviceBuffer<float> d_scale_a(scale_a), d_scale_b(scale_b), d_shift(shift), d_y(per_element);
  mgt::cuda::channel_affine(d_a.data(), d_scale_a.data(), d_b.data(), d_scale_b.data(), d_shift.data(), d_y.data(),
                            batch, channels, plane, nullptr);
  mgt::cuda::synchronize();
  EXPECT_EQ(d_y.to_host(), cpu_y) << "channel affine";
}

TEST_F(GpuLayerOps, SoftmaxXentAccumulateMatchesCpu) {
  for (const Shape s : {Shape{1, 1}, Shape{7, 10}, Shape{128, 10}, Shape{33, 1000}, Shape{5, 4097}}) {
    const int64_t rows = s.rows, classes = s.cols;
    const std::string what = shape_name(s);
    auto logits = random_floats(rows * classes, 7, -8.0f, 8.0f);
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 7919) % classes);
    // Make about half the rows right, and some of them ties: a row whose maximum appears twice
    // counts as right only when the label is the first of the two, so a tie just before the
    // label makes the row wrong (and one wrapped round to the end leaves it right).
    for (int64_t r = 0; r < rows; r += 2) {
      float* x = logits.data() + r * classes;
      x[labels[r]] = 20.0f;
      if (classes > 2 && r % 4 == 0) x[(labels[r] + classes - 1) % classes] = 20.0f;
    }
    const float grad_scale = 1.0f / static_cast<float>(rows);
    std::vector<float> grad(logits.size());
    const double loss =
        mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), rows, classes, grad_scale);
    const int64_t correct = mgt::kernels::count_correct(logits.data(), labels.data(), rows, classes);
    if (rows > 1 && classes > 2) {
      EXPECT_GT(correct, 0) << what;
      EXPECT_LT(correct, rows) << what;
    }

    DeviceBuffer<float> d_logits(logits), d_grad(logits.size());
    DeviceBuffer<int32_t> d_labels(labels);
    DeviceBuffer<double> d_row_loss(rows), d_loss_sum(std::vector<double>{0.25});
    DeviceBuffer<int64_t> d_correct(std::vector<int64_t>{3});
    mgt::cuda::softmax_xent_accumulate(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), rows,
                                       classes, grad_scale, d_loss_sum.data(), d_correct.data());
    mgt::cuda::synchronize();
    // The batch's rows are summed in order, exactly as sum_row_losses does on the host.
    const double batch_loss = mgt::cuda::sum_row_losses(d_row_loss.data(), rows);
    EXPECT_EQ(d_loss_sum.to_host()[0], 0.25 + batch_loss) << what;
    EXPECT_NEAR(batch_loss, loss, 1e-5 * std::max(1.0, std::fabs(loss))) << what << " loss";
    EXPECT_EQ(d_correct.to_host()[0], 3 + correct) << what << " correct";
    expect_close(d_grad.to_host(), grad, 1e-5, what + " gradient");

    // A second micro-batch adds on.
    mgt::cuda::softmax_xent_accumulate(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), rows,
                                       classes, grad_scale, d_loss_sum.data(), d_correct.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_loss_sum.to_host()[0], (0.25 + batch_loss) + batch_loss) << what;
    EXPECT_EQ(d_correct.to_host()[0], 3 + 2 * correct) << what;
  }
}

TEST_F(GpuLayerOps, SoftmaxXentAccumulateCountsAsTheCpuWithNaN) {
  // The CPU's arg-max keeps index 0 when logit 0 is NaN and passes over NaN elsewhere.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t rows = 3, classes = 4;
  const std::vector<float> logits = {nan,  1.0f, 2.0f, 0.0f,  // arg-max 0
                                     0.0f, nan,  3.0f, 1.0f,  // arg-max 2
                                     nan,  nan,  nan,  nan};  // arg-max 0
  for (const std::vector<int32_t>& labels : {std::vector<int32_t>{0, 2, 0}, std::vector<int32_t>{2, 1, 3}}) {
    const int64_t expected = mgt::kernels::count_correct(logits.data(), labels.data(), rows, classes);
    DeviceBuffer<float> d_logits(logits), d_grad(logits.size());
    DeviceBuffer<int32_t> d_labels(labels);
    DeviceBuffer<double> d_row_loss(rows), d_loss_sum(std::vector<double>{0.0});
    DeviceBuffer<int64_t> d_correct(std::vector<int64_t>{0});
    mgt::cuda::softmax_xent_accumulate(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), rows,
                                       classes, 1.0f, d_loss_sum.data(), d_correct.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_correct.to_host()[0], expected) << "labels " << labels[0] << labels[1] << labels[2];
    EXPECT_TRUE(std::isnan(d_loss_sum.to_host()[0]));
  }
}

TEST_F(GpuLayerOps, FlagNonfiniteFindsNaNAndInfinityAndNeverClears) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  // Past the grid cap (65535 blocks of 256), so the grid-stride loop's tail is covered.
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{65535} * 256 + 7}) {
    auto x = random_floats(n, 8, -1e30f, 1e30f);
    x[0] = std::numeric_limits<float>::max();
    if (n > 1) x[1] = std::numeric_limits<float>::denorm_min();
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<int32_t> d_flag(std::vector<int32_t>{0});
    mgt::cuda::flag_nonfinite(d_x.data(), n, d_flag.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_flag.to_host()[0], 0) << "all finite, n = " << n;

    for (const float special : specials) {
      d_flag.fill_zero();
      const size_t at = n - 1;  // the last element: the end of the last thread's stride
      const float keep = x[at];
      x[at] = special;
      d_x.upload(x.data(), n);
      mgt::cuda::flag_nonfinite(d_x.data(), n, d_flag.data());
      mgt::cuda::synchronize();
      EXPECT_EQ(d_flag.to_host()[0], 1) << special << " at " << at << ", n = " << n;
      x[at] = keep;
    }

    d_x.upload(x.data(), n);
    d_flag.upload(std::vector<int32_t>{1}.data(), 1);
    mgt::cuda::flag_nonfinite(d_x.data(), n, d_flag.data());
    mgt::cuda::synchronize();
    EXPECT_EQ(d_flag.to_host()[0], 1) << "cleared by finite input, n = " << n;
  }
}

// Label smoothing: the GPU's loss and gradient against the CPU's, for narrow and wide rows.
TEST_F(GpuLayerOps, SoftmaxXentWithLabelSmoothingMatchesCpu) {
  for (const Shape s : {Shape{7, 10}, Shape{300, 257}}) {
    const int64_t rows = s.rows, classes = s.cols;
    const std::string what = shape_name(s);
    const auto logits = random_floats(rows * classes, 17, -8.0f, 8.0f);
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 31) % classes);
    const float grad_scale = 1.0f / static_cast<float>(rows), e = 0.1f;
    std::vector<float> grad(logits.size());
    const double loss =
        mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), rows, classes, grad_scale, e);
    DeviceBuffer<float> d_logits(logits), d_grad(logits.size());
    DeviceBuffer<int32_t> d_labels(labels);
    DeviceBuffer<double> d_row_loss(rows), d_loss_sum(std::vector<double>{0.0});
    DeviceBuffer<int64_t> d_correct(std::vector<int64_t>{0});
    mgt::cuda::softmax_xent_accumulate(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), rows,
                                       classes, grad_scale, d_loss_sum.data(), d_correct.data(), nullptr, e);
    mgt::cuda::synchronize();
    EXPECT_NEAR(d_loss_sum.to_host()[0], loss, 1e-5 * std::max(1.0, std::fabs(loss))) << what << " loss";
    expect_close(d_grad.to_host(), grad, 1e-5, what + " gradient");
  }
}

// Clipping by global norm: the norm in the CPU's order gives the CPU's bits, and so does the
// scaled gradient; under the limit nothing changes.
TEST_F(GpuLayerOps, ClipGlobalNormMatchesCpuBitForBit) {
  for (const size_t n : {size_t{1}, size_t{1023}, size_t{1025}, size_t{300007}}) {
    for (const float max_norm : {0.0f, 0.5f, 1e9f}) {
      auto x = random_floats(n, 21);
      std::vector<float> expected = x;
      double cpu_norm = 0;
      mgt::kernels::clip_global_norm(expected.data(), n, max_norm, &cpu_norm);
      DeviceBuffer<float> d_x(x);
      DeviceBuffer<double> d_norm(1), d_partials((n + 1023) / 1024);
      mgt::cuda::clip_global_norm(d_x.data(), n, max_norm, d_norm.data(), d_partials.data());
      mgt::cuda::synchronize();
      EXPECT_EQ(d_norm.to_host()[0], cpu_norm) << "n = " << n << ", max_norm " << max_norm;
      EXPECT_EQ(d_x.to_host(), expected) << "n = " << n << ", max_norm " << max_norm;
      if (max_norm != 0.5f) {
        EXPECT_EQ(d_x.to_host(), x) << "clipped under the limit, n = " << n;
      }
    }
  }
}

TEST_F(GpuLayerOps, MultiplyMatchesCpu) {
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{100003}}) {
    const auto x = random_floats(n, 9);
    auto s = random_floats(n, 10, 0.0f, 1.0f);
    mgt::kernels::dropout_scales(s.data(), n, 0.3f);
    std::vector<float> y(n);
    mgt::kernels::multiply(x.data(), s.data(), y.data(), n);
    DeviceBuffer<float> d_x(x), d_s(s), d_y(n);
    mgt::cuda::multiply(d_x.data(), d_s.data(), d_y.data(), n);
    mgt::cuda::synchronize();
    EXPECT_EQ(d_y.to_host(), y) << "n = " << n;
  }
}

}  // namespace
