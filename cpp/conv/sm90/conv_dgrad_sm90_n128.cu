// The sm90 data-gradient convolution with a 128-channel-wide CTA tile,
// bfloat16 and float16 (conv_dgrad_sm90_kernel.cuh).
#include "conv/sm90/conv_dgrad_sm90_kernel.cuh"

JAXDNN_CONV_DGRAD_SM90_TILE(128)
