#pragma once
// The one oneDNN CPU engine and stream every CPU kernel in the process shares.
#include "oneapi/dnnl/dnnl.hpp"

namespace mgt::kernels {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

}  // namespace mgt::kernels
