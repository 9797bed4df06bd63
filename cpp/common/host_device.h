// JAXDNN_HD: a function shared by the CPU kernels and the CUDA ones (inline
// for the host compiler, __host__ __device__ under nvcc).
#pragma once

#if defined(__CUDACC__)
#define JAXDNN_HD __host__ __device__ __forceinline__
#else
#define JAXDNN_HD inline
#endif

// JAXDNN_UNROLL: unroll the next loop in device code (shared functions'
// small constant loops, so their constants fold); nothing on the host.
#if defined(__CUDACC__)
#define JAXDNN_UNROLL _Pragma("unroll")
#else
#define JAXDNN_UNROLL
#endif
