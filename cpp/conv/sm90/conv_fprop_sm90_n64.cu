// The sm90 forward convolution with a 64-channel-wide CTA tile, bfloat16
// and float16 (conv_fprop_sm90_kernel.cuh).
#include "conv/sm90/conv_fprop_sm90_kernel.cuh"

JAXDNN_CONV_FPROP_SM90_TILE(64)
