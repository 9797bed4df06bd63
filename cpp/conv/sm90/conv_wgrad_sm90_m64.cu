// The sm90 weight-gradient convolution with a 64-output-channel CTA tile,
// bfloat16 and float16 (conv_wgrad_sm90_kernel.cuh).
#include "conv/sm90/conv_wgrad_sm90_kernel.cuh"

JAXDNN_CONV_WGRAD_SM90_TILE(64)
