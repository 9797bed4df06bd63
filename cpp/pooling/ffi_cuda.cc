// Pooling has no CUDA kernel yet: the CUDA module gets no target from this
// family, and Python serves a GPU call with the XLA composition (with a
// warning), or refuses implementation="cuda".
#include "common/ffi_registry.h"

namespace jaxdnn::pooling {

FamilyExports CudaExports() { return {{}, {}}; }

}  // namespace jaxdnn::pooling
