// Python module _jaxdnn_cuda: every family's CUDA FFI targets and plan queries.
#define JAXDNN_MODULE _jaxdnn_cuda
#define JAXDNN_EXPORTS CudaExports
#include "bindings/module.inc"
