#include "kernels/cpu/dnnl_context.hpp"

namespace mgt::kernels {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

}  // namespace mgt::kernels
