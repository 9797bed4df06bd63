// JAXDNN_HD: a function shared by the CPU kernels and the CUDA ones (inline
// for the host compiler, __host__ __device__ under nvcc).
#pragma once

#if defined(__CUDACC__)
#define JAXDNN_HD __host__ __device__ __forceinline__
#else
#define JAXDNN_HD inline
#endif
