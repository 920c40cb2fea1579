// placeholder, replaced by the kernels
