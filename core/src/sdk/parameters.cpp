#include "mgtrain/parameters.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"

namespace mgt {

namespace {
constexpr size_t kAlignFloats = 16;  // 64 bytes

// Parameters and buffers share one namespace (checkpoints name both): a new `kind` ("parameter"
// or "buffer") name must be neither's yet.
void check_name_free(const std::string& name, const std::string& kind, const std::vector<ParamInfo>& params,
                     const std::vector<BufferInfo>& buffers) {
  for (const auto& p : params)
    MGT_CHECK(p.name != name, Error,
              kind + " name '" + name + "' " + (kind == "parameter" ? "declared twice" : "is already a parameter's"));
  for (const auto& b : buffers)
    MGT_CHECK(b.name != name, Error,
              kind + " name '" + name + "' " + (kind == "buffer" ? "declared twice" : "is already a buffer's"));
}

// Gives each item its offset in a flat buffer, in order and 64-byte aligned; returns the floats
// they span.
template <typename Info>
size_t lay_out(std::vector<Info>& items) {
  size_t offset = 0;
  for (auto& item : items) {
    item.offset = offset;
    offset += (item.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }
  return offset;
}

// Refuses, before allocating, a model whose parameters and their gradients alone would not fit in
// this host's memory: a model key set far too large would otherwise end as a bare std::bad_alloc.
// Sizes are summed as doubles, so a product of large dimensions cannot wrap.
void check_fits_in_memory(const std::vector<ParamInfo>& params, const std::vector<BufferInfo>& buffers) {
  auto floats = [](const Shape& shape) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    return n;
  };
  double total = 0, largest = -1;
  const ParamInfo* biggest = nullptr;
  for (const auto& p : params) {
    const double n = floats(p.shape);
    total += 2 * n;  // the parameter and its gradient
    if (n > largest) largest = n, biggest = &p;
  }
  for (const auto& b : buffers) total += floats(b.shape);
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double bytes = total * sizeof(float);
  if (memory <= 0 || bytes <= memory || !biggest) return;
  char text[256];
  std::snprintf(text, sizeof text,
                "the model's parameters and gradients need %.1f GB (parameter '%s' %s alone %.1f GB), more than "
                "this host's %.1f GB of memory: lower the model's sizes (model.* keys)",
                bytes / 1e9, biggest->name.c_str(), shape_string(biggest->shape).c_str(),
                2 * largest * sizeof(float) / 1e9, memory / 1e9);
  throw ConfigError(text);
}
}  // namespace

ParamHandle ParameterStore::declare(const std::string& name, const Shape& shape, Init init, int64_t fan_in) {
  MGT_CHECK(!finalized_, Error, "parameter '" + name + "' declared after the store was finalized");
  check_name_free(name, "parameter", params_, buffers_);
  ParamInfo info;
  info.name = name;
  info.shape = shape;
  info.init = init;
  info.fan_in = fan_in;
  info.numel = static_cast<size_t>(shape_numel(shape));
  params_.push_back(std::move(info));
  return params_.size() - 1;
}

ParamHandle ParameterStore::find(const std::string& name, const std::string& who) const {
  for (size_t h = 0; h < params_.size(); ++h)
    if (params_[h].name == name) return h;
  throw ConfigError(who + " needs the parameter '" + name + "', which no layer before it declares");
}

BufferHandle ParameterStore::declare_buffer(const std::string& name, const Shape& shape, float initial) {
  MGT_CHECK(!finalized_, Error, "buffer '" + name + "' declared after the store was finalized");
  check_name_free(name, "buffer", params_, buffers_);
  BufferInfo info;
  info.name = name;
  info.shape = shape;
  info.initial = initial;
  info.numel = static_cast<size_t>(shape_numel(shape));
  buffers_.push_back(std::move(info));
  return buffers_.size() - 1;
}

void ParameterStore::finalize() {
  MGT_CHECK(!finalized_, Error, "parameter store finalized twice");
  check_fits_in_memory(params_, buffers_);
  flat_size_ = lay_out(params_);
  params_flat_.resize({static_cast<int64_t>(flat_size_)});
  grads_flat_.resize({static_cast<int64_t>(flat_size_)});
  params_flat_.fill(0.0f);
  grads_flat_.fill(0.0f);
  buffers_size_ = lay_out(buffers_);
  buffers_flat_.resize({static_cast<int64_t>(buffers_size_)});
  buffers_flat_.fill(0.0f);
  for (const auto& b : buffers_) std::fill_n(buffers_flat_.data() + b.offset, b.numel, b.initial);
  finalized_ = true;
}

void ParameterStore::initialize(uint64_t seed) {
  MGT_CHECK(finalized_, Error, "parameters initialized before the store was finalized");
  for (const auto& p : params_) {
    float* dst = params_flat_.data() + p.offset;
    const uint64_t key = rng::make_key(seed, rng::purpose_hash(p.name));
    const double fan_in = static_cast<double>(std::max<int64_t>(p.fan_in, 1));
    switch (p.init) {
      case Init::zeros:
        std::memset(dst, 0, p.numel * sizeof(float));
        break;
      case Init::ones:
        std::fill_n(dst, p.numel, 1.0f);
        break;
      case Init::he_uniform: {
        const auto bound = static_cast<float>(std::sqrt(6.0 / fan_in));
        rng::fill_uniform(dst, p.numel, -bound, bound, key, 0);
        break;
      }
      case Init::fan_in_uniform: {
        const auto bound = static_cast<float>(1.0 / std::sqrt(fan_in));
        rng::fill_uniform(dst, p.numel, -bound, bound, key, 0);
        break;
      }
      case Init::small_normal: {
        // Box-Muller over two uniform streams: element i's value depends on (seed, name, i) alone.
        std::vector<float> u(p.numel), v(p.numel);
        rng::fill_uniform(u.data(), p.numel, 0.0f, 1.0f, key, 0);
        rng::fill_uniform(v.data(), p.numel, 0.0f, 1.0f, key, 1);
        constexpr double kTwoPi = 6.283185307179586;
        for (size_t i = 0; i < p.numel; ++i)
          dst[i] = static_cast<float>(0.02 * std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(u[i]))) *
                                      std::cos(kTwoPi * static_cast<double>(v[i])));
        break;
      }
    }
  }
}

Tensor ParameterStore::param_view(ParamHandle h) { return Tensor::view(param(h), params_.at(h).shape); }
Tensor ParameterStore::grad_view(ParamHandle h) { return Tensor::view(grad(h), params_.at(h).shape); }

size_t ParameterStore::param_count() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.numel;
  return n;
}

void ParameterStore::zero_grads() {
  // No parameters, no buffer: memset on a null pointer is undefined even for 0 bytes.
  if (flat_size_ != 0) std::memset(grads_flat_.data(), 0, flat_size_ * sizeof(float));
  grads_discarded_ = false;
}

ParameterStore ParameterStore::with_buffers(float* params, float* grads, float* buffers) const {
  MGT_CHECK(finalized_, Error, "ParameterStore::with_buffers before finalize");
  MGT_CHECK(buffers != nullptr || buffers_size_ == 0, Error, "ParameterStore::with_buffers: the store has buffers");
  ParameterStore other;
  other.params_ = params_;
  other.buffers_ = buffers_;
  other.flat_size_ = flat_size_;
  other.buffers_size_ = buffers_size_;
  other.params_flat_ = Tensor::view(params, {static_cast<int64_t>(flat_size_)});
  other.grads_flat_ = Tensor::view(grads, {static_cast<int64_t>(flat_size_)});
  other.buffers_flat_ = Tensor::view(buffers, {static_cast<int64_t>(buffers_size_)});
  other.finalized_ = true;
  other.view_ = true;
  return other;
}

void ParameterStore::swap_grads(Tensor& other) {
  MGT_CHECK(other.numel() == static_cast<int64_t>(flat_size_), Error,
            "swap_grads: buffer of " + std::to_string(other.numel()) + " floats, the store has " +
                std::to_string(flat_size_));
  std::swap(grads_flat_, other);
}

void ParameterStore::place_grads(float* memory, std::shared_ptr<void> owner) {
  MGT_CHECK(finalized_, Error, "place_grads before finalize");
  std::memcpy(memory, grads_flat_.data(), flat_size_ * sizeof(float));
  grads_flat_ = Tensor::view(memory, {static_cast<int64_t>(flat_size_)});
  grads_owner_ = std::move(owner);
}

void ParameterStore::place_params(float* memory, std::shared_ptr<void> owner, bool copy) {
  MGT_CHECK(finalized_, Error, "place_params before finalize");
  if (copy) std::memcpy(memory, params_flat_.data(), flat_size_ * sizeof(float));
  params_flat_ = Tensor::view(memory, {static_cast<int64_t>(flat_size_)});
  params_owner_ = std::move(owner);
}

}  // namespace mgt
