#include "kernels/cuda/cudnn_ops.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/layer_ops.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

// The most workspace one plan holds. A fixed bound rather than a share of the free memory, so the
// algorithms chosen never depend on what else happens to be allocated.
constexpr size_t kWorkspaceLimit = size_t{64} << 20;

// The legacy cuDNN API takes int sizes and tensors of fewer than 2^31 elements.
constexpr int64_t kMaxElements = INT_MAX;

std::string conv_text(const kernels::Conv2dShape& s, int64_t batch) {
  return "conv2d (batch " + std::to_string(batch) + ", " + std::to_string(s.in_channels) + "x" +
         std::to_string(s.height) + "x" + std::to_string(s.width) + " -> " + std::to_string(s.out_channels) +
         " channels, kernel " + std::to_string(s.kernel) + ", stride " + std::to_string(s.stride) + ", padding " +
         std::to_string(s.padding) + ")";
}

std::string pool_text(int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t kernel, int64_t stride) {
  return "max pool (batch " + std::to_string(batch) + ", " + std::to_string(channels) + "x" + std::to_string(height) +
         "x" + std::to_string(width) + ", kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) +
         ")";
}

bool fits_int(std::initializer_list<int64_t> values) {
  return std::all_of(values.begin(), values.end(), [](int64_t v) { return v <= INT_MAX; });
}

// Math types that may run on tensor cores, which round float32 inputs to TF32.
bool tensor_op_math(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The first of cuDNN's ranked candidates (heuristics order: expected fastest first) that
// succeeded, is deterministic by cuDNN's word and by its documentation (`nondeterministic` lists
// the algorithms the reproducibility notes name as using atomics), uses no tensor-op math unless
// `tensor_ops` (bf16: tensor cores are the point; FP32: they would round to TF32) and whose
// workspace, as `workspace_size` reports it for this shape, is within the limit. cuDNN ranks
// pairs of algorithm and math type: with tensor_ops the pair's math type is set on `desc` before
// its workspace is asked for, and returned in *math, to be set again before the algorithm runs
// (the plan's directions share the descriptor).
template <typename Perf, typename Algo, typename WorkspaceSize>
Algo choose_algorithm(const std::vector<Perf>& ranked, int returned, std::initializer_list<Algo> nondeterministic,
                      bool tensor_ops, cudnnConvolutionDescriptor_t desc, int* math, WorkspaceSize workspace_size,
                      const char* direction, const std::string& what, size_t* bytes) {
  for (int i = 0; i < returned; ++i) {
    const Perf& perf = ranked[static_cast<size_t>(i)];
    if (perf.status != CUDNN_STATUS_SUCCESS || perf.determinism != CUDNN_DETERMINISTIC ||
        (!tensor_ops && tensor_op_math(perf.mathType)))
      continue;
    if (std::find(nondeterministic.begin(), nondeterministic.end(), perf.algo) != nondeterministic.end()) continue;
    if (tensor_ops) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc, perf.mathType));
    size_t need = 0;
    if (workspace_size(perf.algo, &need) != CUDNN_STATUS_SUCCESS) continue;
    need = std::max(need, perf.memory);
    if (need > kWorkspaceLimit) continue;
    *bytes = need;
    *math = tensor_ops ? static_cast<int>(perf.mathType) : static_cast<int>(CUDNN_FMA_MATH);
    return perf.algo;
  }
  throw CudaError(what + ": cuDNN offers no deterministic " + (tensor_ops ? "bf16 " : "FP32 ") + direction +
                  " algorithm using " + "at most " + std::to_string(kWorkspaceLimit >> 20) + " MiB of workspace (" +
                  std::to_string(returned) + " candidates)");
}

}  // namespace

CudnnHandle::CudnnHandle() { MGT_CUDNN_CHECK(cudnnCreate(&handle_)); }

CudnnHandle::~CudnnHandle() {
  if (handle_) cudnnDestroy(handle_);
}

void CudnnHandle::set_stream(Stream stream) {
  MGT_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  stream_ = stream;
}

ConvPlan::ConvPlan(CudnnHandle& cudnn, const kernels::Conv2dShape& shape, int64_t batch, bool bf16)
    : cudnn_(&cudnn), shape_(shape), batch_(batch), bf16_(bf16) {
  const auto& s = shape;
  const std::string what = conv_text(s, batch);
  MGT_CHECK(batch > 0 && s.in_channels > 0 && s.out_channels > 0 && s.kernel > 0 && s.stride > 0 && s.padding >= 0 &&
                s.height > 0 && s.width > 0,
            Error, what + ": sizes, kernel and stride must be positive and padding not negative");
  MGT_CHECK(s.out_height() > 0 && s.out_width() > 0 && s.height + 2 * s.padding >= s.kernel &&
                s.width + 2 * s.padding >= s.kernel,
            Error, what + ": the padded input is smaller than the kernel");
  MGT_CHECK(fits_int({batch, s.in_channels, s.out_channels, s.kernel, s.stride, s.padding, s.height, s.width}) &&
                batch * s.in_channels * s.height * s.width <= kMaxElements &&
                batch * s.out_channels * s.out_height() * s.out_width() <= kMaxElements &&
                s.out_channels * s.in_channels * s.kernel * s.kernel <= kMaxElements,
            Error, what + ": cuDNN takes tensors of at most " + std::to_string(kMaxElements) + " elements");
  const int n = static_cast<int>(batch), ic = static_cast<int>(s.in_channels), oc = static_cast<int>(s.out_channels),
            k = static_cast<int>(s.kernel), stride = static_cast<int>(s.stride), pad = static_cast<int>(s.padding);
  const int oh = static_cast<int>(s.out_height()), ow = static_cast<int>(s.out_width());
  cudnnContext* h = cudnn.get();
  try {
    MGT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
    MGT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
    MGT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_desc_));
    MGT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
    MGT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
    const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    MGT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, type, n, ic, static_cast<int>(s.height),
                                               static_cast<int>(s.width)));
    MGT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, type, n, oc, oh, ow));
    MGT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, oc, 1, 1));
    MGT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, type, CUDNN_TENSOR_NCHW, oc, ic, k, k));
    // Cross-correlation, as oneDNN and the frameworks call convolution; accumulation in FP32
    // (bf16 tensors included: cuDNN's BFLOAT16 configuration).
    MGT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
    // FP32: FMA math keeps tensor cores (TF32) out, so results agree with the CPU in FP32. bf16:
    // tensor cores. Set before the queries so the heuristics rank only algorithms that honour it.
    MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));

    int dims[4] = {0, 0, 0, 0};
    MGT_CUDNN_CHECK(
        cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &dims[0], &dims[1], &dims[2], &dims[3]));
    MGT_CHECK(dims[0] == n && dims[1] == oc && dims[2] == oh && dims[3] == ow, CudaError,
              what + ": cuDNN computes an output of " + std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" +
                  std::to_string(dims[2]) + "x" + std::to_string(dims[3]) + ", expected " + std::to_string(n) + "x" +
                  std::to_string(oc) + "x" + std::to_string(oh) + "x" + std::to_string(ow));

    // Heuristics, not cudnnFind: Find times the candidates, and a choice that follows timings
    // could differ between runs, and with it the results' rounding.
    size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
    {
      int count = 0, returned = 0;
      MGT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(static_cast<size_t>(std::max(count, 1)));
      // Each direction's ranking starts from tensor-op math (the previous choice set its own).
      if (bf16) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, CUDNN_TENSOR_OP_MATH));
      MGT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_desc_, w_desc_, conv_desc_, y_desc_, count, &returned,
                                                             ranked.data()));
      fwd_algo_ = choose_algorithm(
          ranked, returned, std::initializer_list<cudnnConvolutionFwdAlgo_t>{}, bf16, conv_desc_, &fwd_math_,
          [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_, w_desc_, conv_desc_, y_desc_, algo, bytes);
          },
          "forward", what, &fwd_bytes);
    }
    {
      int count = 0, returned = 0;
      MGT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(static_cast<size_t>(std::max(count, 1)));
      if (bf16) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, CUDNN_TENSOR_OP_MATH));
      MGT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc_, y_desc_, conv_desc_, x_desc_, count,
                                                                  &returned, ranked.data()));
      bwd_data_algo_ = choose_algorithm(
          ranked, returned, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0}, bf16, conv_desc_, &bwd_data_math_,
          [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_desc_, y_desc_, conv_desc_, x_desc_, algo, bytes);
          },
          "backward-data", what, &data_bytes);
    }
    {
      int count = 0, returned = 0;
      MGT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(static_cast<size_t>(std::max(count, 1)));
      if (bf16) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, CUDNN_TENSOR_OP_MATH));
      MGT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_desc_, y_desc_, conv_desc_, w_desc_, count,
                                                                    &returned, ranked.data()));
      bwd_filter_algo_ = choose_algorithm(
          ranked, returned, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3}, bf16,
          conv_desc_, &bwd_filter_math_,
          [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_desc_, y_desc_, conv_desc_, w_desc_, algo,
                                                                  bytes);
          },
          "backward-filter", what, &filter_bytes);
    }
    workspace_bytes_ = std::max({fwd_bytes, data_bytes, filter_bytes});
    workspace_ = device_malloc(workspace_bytes_);
  } catch (...) {
    release();
    throw;
  }
}

ConvPlan::~ConvPlan() { release(); }

void ConvPlan::release() noexcept {
  // Also reached while unwinding from a failed construction: nothing to report here.
  device_free(workspace_);
  workspace_ = nullptr;
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (bias_desc_) cudnnDestroyTensorDescriptor(bias_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  conv_desc_ = nullptr;
  w_desc_ = nullptr;
  bias_desc_ = y_desc_ = x_desc_ = nullptr;
}

std::string ConvPlan::algorithms() const {
  return "forward " + std::to_string(fwd_algo_) + ", backward-data " + std::to_string(bwd_data_algo_) +
         ", backward-filter " + std::to_string(bwd_filter_algo_);
}

void ConvPlan::run_forward(const void* x, const void* w, void* y) {
  // cuDNN reads alpha and beta on the host when the call is made (or captured); they are float
  // for float and bf16 tensors alike.
  const float one = 1.0f, zero = 0.0f;
  if (bf16_) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, static_cast<cudnnMathType_t>(fwd_math_)));
  MGT_CUDNN_CHECK(cudnnConvolutionForward(cudnn_->get(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(fwd_algo_), workspace_,
                                          workspace_bytes_, &zero, y_desc_, y));
}

void ConvPlan::run_backward_data(const void* dy, const void* w, void* dx) {
  const float one = 1.0f, zero = 0.0f;
  if (bf16_) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, static_cast<cudnnMathType_t>(bwd_data_math_)));
  MGT_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_->get(), &one, w_desc_, w, y_desc_, dy, conv_desc_,
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(bwd_data_algo_), workspace_,
                                               workspace_bytes_, &zero, x_desc_, dx));
}

void ConvPlan::run_backward_filter(const void* x, const void* dy, void* dw, float beta) {
  // beta = 0: cuDNN writes dw without reading it, so stale or NaN contents do not leak in.
  const float one = 1.0f;
  if (bf16_) MGT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, static_cast<cudnnMathType_t>(bwd_filter_math_)));
  MGT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn_->get(), &one, x_desc_, x, y_desc_, dy, conv_desc_,
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(bwd_filter_algo_),
                                                 workspace_, workspace_bytes_, &beta, w_desc_, dw));
}

void ConvPlan::forward(const float* x, const float* w, const float* bias, float* y) {
  MGT_CHECK(!bf16_, Error, "ConvPlan::forward on a bf16 plan");
  run_forward(x, w, y);
  const float one = 1.0f;
  if (bias) MGT_CUDNN_CHECK(cudnnAddTensor(cudnn_->get(), &one, bias_desc_, bias, &one, y_desc_, y));
}

void ConvPlan::backward_data(const float* dy, const float* w, float* dx) {
  MGT_CHECK(!bf16_, Error, "ConvPlan::backward_data on a bf16 plan");
  run_backward_data(dy, w, dx);
}

void ConvPlan::backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate) {
  MGT_CHECK(!bf16_, Error, "ConvPlan::backward_weights on a bf16 plan");
  run_backward_filter(x, dy, dw, accumulate ? 1.0f : 0.0f);
  // Our own fixed-order reduction rather than cudnnConvolutionBackwardBias, whose summation order
  // cuDNN does not document as reproducible (and which is deprecated with the rest of the legacy
  // API in cuDNN 9).
  if (dbias)
    channel_sums(dy, dbias, batch_, shape_.out_channels, shape_.out_height() * shape_.out_width(), accumulate,
                 cudnn_->stream());
}

void ConvPlan::forward_bf16(const uint16_t* x, const uint16_t* w, uint16_t* y) {
  MGT_CHECK(bf16_, Error, "ConvPlan::forward_bf16 on a float32 plan");
  run_forward(x, w, y);
}

void ConvPlan::backward_data_bf16(const uint16_t* dy, const uint16_t* w, uint16_t* dx) {
  MGT_CHECK(bf16_, Error, "ConvPlan::backward_data_bf16 on a float32 plan");
  run_backward_data(dy, w, dx);
}

void ConvPlan::backward_filter_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dw) {
  MGT_CHECK(bf16_, Error, "ConvPlan::backward_filter_bf16 on a float32 plan");
  run_backward_filter(x, dy, dw, 0.0f);
}

MaxPoolPlan::MaxPoolPlan(CudnnHandle& cudnn, int64_t batch, int64_t channels, int64_t height, int64_t width,
                         int64_t kernel, int64_t stride)
    : cudnn_(&cudnn) {
  const std::string what = pool_text(batch, channels, height, width, kernel, stride);
  MGT_CHECK(batch > 0 && channels > 0 && height > 0 && width > 0 && kernel > 0 && stride > 0, Error,
            what + ": sizes, kernel and stride must be positive");
  MGT_CHECK(kernel <= height && kernel <= width, Error, what + ": the input is smaller than the kernel");
  out_height_ = (height - kernel) / stride + 1;
  out_width_ = (width - kernel) / stride + 1;
  MGT_CHECK(
      fits_int({batch, channels, height, width, kernel, stride}) && batch * channels * height * width <= kMaxElements,
      Error, what + ": cuDNN takes tensors of at most " + std::to_string(kMaxElements) + " elements");
  const int n = static_cast<int>(batch), c = static_cast<int>(channels);
  const int oh = static_cast<int>(out_height_), ow = static_cast<int>(out_width_);
  try {
    MGT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
    MGT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
    MGT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_desc_));
    MGT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c,
                                               static_cast<int>(height), static_cast<int>(width)));
    MGT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, oh, ow));
    MGT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN,
                                                static_cast<int>(kernel), static_cast<int>(kernel), 0, 0,
                                                static_cast<int>(stride), static_cast<int>(stride)));
    int dims[4] = {0, 0, 0, 0};
    MGT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_desc_, x_desc_, &dims[0], &dims[1], &dims[2], &dims[3]));
    MGT_CHECK(dims[0] == n && dims[1] == c && dims[2] == oh && dims[3] == ow, CudaError,
              what + ": cuDNN computes an output of " + std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" +
                  std::to_string(dims[2]) + "x" + std::to_string(dims[3]) + ", expected " + std::to_string(n) + "x" +
                  std::to_string(c) + "x" + std::to_string(oh) + "x" + std::to_string(ow));
  } catch (...) {
    release();
    throw;
  }
}

MaxPoolPlan::~MaxPoolPlan() { release(); }

void MaxPoolPlan::release() noexcept {
  if (pool_desc_) cudnnDestroyPoolingDescriptor(pool_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  pool_desc_ = nullptr;
  y_desc_ = x_desc_ = nullptr;
}

void MaxPoolPlan::forward(const float* x, float* y) {
  const float one = 1.0f, zero = 0.0f;
  MGT_CUDNN_CHECK(cudnnPoolingForward(cudnn_->get(), pool_desc_, &one, x_desc_, x, &zero, y_desc_, y));
}

void MaxPoolPlan::backward(const float* x, const float* y, const float* dy, float* dx) {
  const float one = 1.0f, zero = 0.0f;
  MGT_CUDNN_CHECK(
      cudnnPoolingBackward(cudnn_->get(), pool_desc_, &one, y_desc_, y, y_desc_, dy, x_desc_, x, &zero, x_desc_, dx));
}

}  // namespace mgt::cuda
