// The CUDA Winograd forward (algorithm="winograd"): F(2x2, 3x3) for
// bfloat16/float16, F(4x4, 3x3) for float32 where the output has 4 rows and
// columns (conv/winograd_math.h), in four launches on XLA's workspace:
//   1. the weights' transform U = G g G^T, [points][groups][Cp][Kp];
//   2. the input's transform V = B^T d B of every tile, [points][groups][Tp][Cp];
//   3. one GEMM a (point, group): M = V U, float32 [points][groups][Tp][Kp]
//      (mma.sync tensor cores for 16-bit operands, float32 FMAs for float32);
//   4. the output transform Y = A^T M A of each tile with the whole epilogue
//      (alpha, bias, beta * residual, activation, z saved where asked).
// Tp, Cp and Kp round the tiles, the input and the output channels of a
// group up to the GEMM's blocks; the transforms write zeros there, so the
// GEMM runs unpredicated. 16-bit operands use the 2x2 tile because the 4x4
// tile's transforms (weights up to 8 and 25) amplify their rounding: a
// bfloat16 F(4x4) simulation is off by 5% of the output's largest value,
// F(2x2) by 0.4% (docs/perf/conv.md, "CUDA Winograd").
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/launch_status.h"
#include "conv/problem.h"

namespace jaxdnn::conv {

// The layout one call runs on; WinogradFwdWorkspace and the launcher both
// compute it from the problem, so XLA allocates what the launch uses.
struct WinogradCudaPlan {
  int tile = 2;                                  // M
  int points = 16;                               // (M + 2)^2
  int64_t tiles_h = 0, tiles_w = 0, tiles = 0;   // M x M output tiles: per image row, column; in all
  int64_t tp = 0, cp = 0, kp = 0;                // padded tiles, group input and output channels
  size_t u_bytes = 0, v_bytes = 0, m_bytes = 0;  // each rounded up to 256 bytes
  size_t workspace() const { return u_bytes + v_bytes + m_bytes; }
};

WinogradCudaPlan PlanWinogradCuda(const ConvGeometry& g, ffi::DataType dtype);

// Why WinogradFwdCuda would refuse p, or nullptr.
const char* WinogradFwdRefusal(const ConvFwdArgs& p);

size_t WinogradFwdWorkspace(const ConvFwdArgs& p);

// The output tile side p runs with (2 or 4).
int WinogradCudaTile(const ConvFwdArgs& p);

// Enqueues the four launches on `stream` (no allocation, no host sync).
LaunchStatus WinogradFwdCuda(const ConvFwdArgs& p, cudaStream_t stream);

}  // namespace jaxdnn::conv
