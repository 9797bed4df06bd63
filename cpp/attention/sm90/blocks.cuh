// The shared Hopper building blocks (cpp/common/sm90: PTX wrappers, TMA
// descriptors, wgmma tile products), visible unqualified inside the attention
// sm90 kernels' namespace.
#pragma once

#include "common/sm90/ptx.cuh"
#include "common/sm90/tile_gemm.cuh"
#include "common/sm90/tma_desc.h"

namespace jaxdnn::attention::sm90 {
using namespace ::jaxdnn::sm90;
}  // namespace jaxdnn::attention::sm90
