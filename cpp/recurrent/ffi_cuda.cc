// The recurrent family has no CUDA kernels yet: on CUDA its primitives lower
// to the plain-JAX recurrence (jaxdnn/rnn/primitives.py, `fallback`), so it
// exports no CUDA targets.
#include "common/ffi_registry.h"

namespace jaxdnn::recurrent {

FamilyExports CudaExports() { return {{}, {}}; }

}  // namespace jaxdnn::recurrent
