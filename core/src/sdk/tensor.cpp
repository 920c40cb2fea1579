#include "mgtrain/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mgtrain/error.hpp"

namespace mgt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void Tensor::FreeDeleter::operator()(float* p) const { std::free(p); }

Tensor::Tensor(Shape shape) { resize(shape); }

Tensor Tensor::view(float* data, Shape shape) {
  Tensor t;
  t.data_ = data;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::resize(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  if (!storage_ && data_) {
    MGT_CHECK(n == numel_, Error,
              "tensor view cannot change size: " + shape_string(shape_) + " -> " + shape_string(shape));
  } else if (static_cast<size_t>(n) > capacity_) {
    const size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)));
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    storage_.reset(p);
    capacity_ = bytes / sizeof(float);
    data_ = p;
  }
  shape_ = shape;
  numel_ = n;
}

void Tensor::reshape(const Shape& shape) {
  MGT_CHECK(shape_numel(shape) == numel_, Error,
            "cannot reshape " + shape_string(shape_) + " to " + shape_string(shape));
  shape_ = shape;
}

void Tensor::rebind(float* data) {
  MGT_CHECK(!storage_, Error, "rebind: tensor " + shape_string(shape_) + " owns its memory, it is not a view");
  data_ = data;
}

void Tensor::fill(float value) { std::fill(data_, data_ + numel_, value); }

}  // namespace mgt
