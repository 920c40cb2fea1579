#pragma once
// A float32 tensor: either a view of memory owned elsewhere (the flat parameter buffer, a prefetch
// slot) or the owner of a 64-byte-aligned block. Layers keep owned tensors for activations and
// size them once, on the first step; nothing allocates afterwards.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/export.hpp"

namespace mgt {

using Shape = std::vector<int64_t>;

MGT_API int64_t shape_numel(const Shape& shape);
MGT_API std::string shape_string(const Shape& shape);  // "[128, 1, 28, 28]"

class MGT_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape);  // owning, zero-filled
  static Tensor view(float* data, Shape shape);

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Owning tensors keep their block when the new shape fits in it; views must keep their size.
  void resize(const Shape& shape);
  // Reinterprets the same elements with another shape of equal numel.
  void reshape(const Shape& shape);
  // Points a view at other memory of the same shape: a step reuses one view instead of building
  // a new one (and its shape) every time.
  void rebind(float* data);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  void fill(float value);

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], FreeDeleter> storage_;
  size_t capacity_ = 0;
  float* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
};

}  // namespace mgt
