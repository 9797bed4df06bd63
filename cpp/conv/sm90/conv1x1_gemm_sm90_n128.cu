// The 1x1 forward GEMM with a 128-channel-wide CTA tile, bfloat16 and
// float16 (conv1x1_gemm_sm90_kernel.cuh).
#include "conv/sm90/conv1x1_gemm_sm90_kernel.cuh"

JAXDNN_CONV1X1_GEMM_SM90_TILE(128)
