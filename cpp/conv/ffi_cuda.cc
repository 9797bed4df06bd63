// The convolution family has no CUDA kernels yet (issue 25): on CUDA its
// primitives lower to XLA's convolution (jaxdnn/conv/primitives.py,
// `fallback`), so it exports no CUDA targets.
#include "common/ffi_registry.h"

namespace jaxdnn::conv {

FamilyExports CudaExports() { return {{}, {}}; }

}  // namespace jaxdnn::conv
