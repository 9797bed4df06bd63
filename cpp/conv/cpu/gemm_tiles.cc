#include "conv/cpu/gemm_tiles.h"

#include <algorithm>
#include <cstring>

#include "common/cpu_clones.h"

namespace jaxdnn::conv {

JAXDNN_CPU_CLONES void GemmAcc(const float* a, int64_t lda, const Run* runs, int64_t nruns, int64_t ldb,
                               float* c, int64_t ldc, int64_t rows, int64_t cols) {
  // 8-float vectors (GCC's vector extension: ymm registers on AVX2/AVX-512),
  // two per tile row.
  typedef float V8 __attribute__((vector_size(32)));
  for (int64_t p0 = 0; p0 < rows; p0 += kTileRows) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
      V8 acc[kTileRows][2] = {};
      const float* ap = a + p0 * lda;
      for (int64_t r = 0; r < nruns; ++r) {
        const float* bp = runs[r].b + c0;
        for (int64_t k = 0; k < runs[r].depth; ++k, ++ap) {
          V8 b0, b1;
          std::memcpy(&b0, bp + k * ldb, sizeof(V8));
          std::memcpy(&b1, bp + k * ldb + 8, sizeof(V8));
          for (int p = 0; p < kTileRows; ++p) {
            const float av = ap[p * lda];
            acc[p][0] += av * b0;
            acc[p][1] += av * b1;
          }
        }
      }
      const int64_t pn = std::min(kTileRows, rows - p0), cn = std::min(kTileCols, cols - c0);
      for (int64_t p = 0; p < pn; ++p) {
        float out[kTileCols];
        std::memcpy(out, acc[p], sizeof(out));
        for (int64_t q = 0; q < cn; ++q) c[(p0 + p) * ldc + c0 + q] += out[q];
      }
    }
  }
}

}  // namespace jaxdnn::conv
