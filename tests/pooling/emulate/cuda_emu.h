// Host emulation of the CUDA features pool.cu uses: blocks run one after
// another, a block's threads as std::threads (a barrier for __syncthreads).
#pragma once
#define __shared__ static
#define __launch_bounds__(...)
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
#define cudaGetLastError() (cudaSuccess)

using std::max;
using std::min;

namespace emu {
inline uint3 block_dim, grid_dim;
inline thread_local uint3 thread_idx, block_idx;
inline std::barrier<>* bar = nullptr;
inline long launches = 0;

inline void Launch(dim3 grid, dim3 block, int, cudaStream_t, const std::function<void()>& fn) {
  ++launches;
  block_dim = uint3{block.x, block.y, block.z};
  grid_dim = uint3{grid.x, grid.y, grid.z};
  const int nthreads = int(block.x * block.y * block.z);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> b(nthreads);
        bar = &b;
        std::vector<std::thread> ts;
        ts.reserve(nthreads);
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx)
              ts.emplace_back([&, tx, ty, tz, bx, by, bz] {
                thread_idx = uint3{tx, ty, tz};
                block_idx = uint3{bx, by, bz};
                fn();
                bar->arrive_and_drop();
              });
        for (auto& t : ts) t.join();
      }
}
}  // namespace emu

#define threadIdx (emu::thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
inline void __syncthreads() { emu::bar->arrive_and_wait(); }

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcs(const T* p) {
  return *p;
}
template <typename T>
inline void __stcs(T* p, const T& v) {
  *p = v;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int) {
  return v;
}
