// The attention family's problem description, shared by the CPU and CUDA paths.
//
// Layouts (channels last, as jax.nn.dot_product_attention):
//   q, out  [batch, q_len, heads, head_dim]
//   k, v    [batch, kv_len, kv_heads, head_dim]   (heads % kv_heads == 0: GQA/MQA)
//   lse     [batch, heads, q_len] float32 (natural log; -inf for a row with no key)
//   bias    [Bb, Hb, Tb, Sb], each dim 1 (broadcast) or full; mask alike (bool).
// Which (query i, key j) pairs take part is decided by attention/mask.h, the
// one definition both kernels and the Python oracle follow.
#pragma once

#include <cstdint>
#include <string>

#include "common/ffi_util.h"
#include "common/host_device.h"

namespace jaxdnn::attention {

// Bits of the `operands` attribute: which optional operands follow q, k, v.
enum OperandBits : int32_t {
  kHasBias = 1,
  kHasMask = 2,
  kHasQLengths = 4,
  kHasKvLengths = 8,
  kHasSegments = 16,  // query and key/value segment ids, both
  kHasDropout = 32,   // per-batch seeds [batch, 2] uint32
  kHasDlse = 64,      // backward: a cotangent for the returned log-sum-exp
  kWantDbias = 128,   // backward: produce dbias
};

struct AttnShape {
  int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t value_dim = 0;  // value's (and the output's) head dim; 0: head_dim's (MLA: its own)
  JAXDNN_HD int64_t group() const { return heads / kv_heads; }
  JAXDNN_HD int64_t vdim() const { return value_dim > 0 ? value_dim : head_dim; }
};

// "(batch B, q_len T, kv_len S, heads N/K, head_dim D)": the shape in error messages.
inline std::string ShapeText(const AttnShape& s) {
  return "(batch " + std::to_string(s.batch) + ", q_len " + std::to_string(s.q_len) + ", kv_len " +
         std::to_string(s.kv_len) + ", heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) +
         ", head_dim " + std::to_string(s.head_dim) +
         (s.vdim() != s.head_dim ? ", value head_dim " + std::to_string(s.vdim()) : std::string()) + ")";
}

// A broadcastable 4-D operand [B, H, T, S]: element strides, 0 where broadcast.
struct Broadcast4 {
  const void* data = nullptr;
  int64_t dims[4] = {1, 1, 1, 1};
  int64_t stride_b = 0, stride_h = 0, stride_t = 0, stride_s = 0;
  JAXDNN_HD int64_t Offset(int64_t b, int64_t h, int64_t t, int64_t s) const {
    return b * stride_b + h * stride_h + t * stride_t + s * stride_s;
  }
};

// Everything that decides the logits and the mask, apart from q and k.
struct AttnMaskParams {
  float scale = 1.f;
  float softcap = 0.f;  // 0: no softcap; else logits = c * tanh(logits / c)
  bool causal = false;
  int32_t window_left = -1;  // -1: unbounded
  int32_t window_right = -1;
  const int32_t* q_lengths = nullptr;    // [batch]
  const int32_t* kv_lengths = nullptr;   // [batch]
  const int32_t* q_segments = nullptr;   // [batch, q_len]
  const int32_t* kv_segments = nullptr;  // [batch, kv_len]
  float dropout_rate = 0.f;
  const uint32_t* seeds = nullptr;  // [batch, 2]
};

// A paged key/value cache (vLLM's layout): k and v are pools
// [num_blocks, block_size, kv_heads, head_dim], and key position j of batch
// row b lives in pool block block_tables[b, j / block_size] (clamped into the
// pool), row j % block_size. Absent (block_tables null): k and v are the
// contiguous [batch, kv_len, kv_heads, head_dim] arrays.
struct PagedKv {
  const int32_t* block_tables = nullptr;  // [batch, max_blocks]
  int64_t max_blocks = 0, block_size = 0, num_blocks = 0;
  JAXDNN_HD bool on() const { return block_tables != nullptr; }
};

// The row of key position j of batch row b in k/v seen as [rows, kv_heads,
// head_dim]: b * kv_len + j contiguous, the pool row when paged.
JAXDNN_HD int64_t KvRow(const PagedKv& pg, int64_t b, int64_t j, int64_t kv_len) {
  if (!pg.on()) return b * kv_len + j;
  int64_t blk = pg.block_tables[b * pg.max_blocks + j / pg.block_size];
  blk = blk < 0 ? 0 : (blk >= pg.num_blocks ? pg.num_blocks - 1 : blk);
  return blk * pg.block_size + j % pg.block_size;
}

struct AttnFwdArgs {
  AttnShape shape;
  ffi::DataType dtype;  // of q, k, v and out
  const void* q;
  const void* k;
  const void* v;
  Broadcast4 bias;  // data null when absent
  ffi::DataType bias_dtype;
  Broadcast4 mask;  // bool (one byte), data null when absent
  AttnMaskParams mask_params;
  PagedKv paged;  // k and v as a paged pool (paged_attention); off by default
  void* out;
  float* lse;
  // CUDA: float32 scratch of the split-KV decode path, or (uneven cases) the
  // sm90 forward's dynamic tile counter in its first element; may be absent.
  float* workspace = nullptr;
  int64_t workspace_elems = 0;
  int device = -1;  // CUDA: the stream's device (-1: the current one)
};

struct AttnBwdArgs {
  AttnShape shape;
  ffi::DataType dtype;
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const float* lse;
  const void* dout;
  const float* dlse;  // [batch, heads, q_len]; null when absent
  Broadcast4 bias;
  ffi::DataType bias_dtype;
  Broadcast4 mask;
  AttnMaskParams mask_params;
  void* dq;
  void* dk;
  void* dv;
  float* dbias;      // float32 with bias's shape; null when not wanted
  float* workspace;  // CUDA: float32 scratch; null on CPU
  int64_t workspace_elems;
  // false: the backward may add dQ contributions in any order (float32
  // atomics), so reruns can differ in the last bits.
  bool deterministic = true;
  int device = -1;  // CUDA: the stream's device (-1: the current one)
};

ffi::ErrorOr<AttnFwdArgs> ReadFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                                      float scale, float softcap, int32_t causal, int32_t window_left,
                                      int32_t window_right, float dropout_rate);

// paged_attention's forward: q, key_cache, value_cache, block_tables,
// context_lengths -> out, lse, [workspace]; causal at the end of each context.
ffi::ErrorOr<AttnFwdArgs> ReadPagedFwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, float scale,
                                           float softcap, int32_t window_left, int32_t window_right);

ffi::ErrorOr<AttnBwdArgs> ReadBwdCall(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t operands,
                                      float scale, float softcap, int32_t causal, int32_t window_left,
                                      int32_t window_right, float dropout_rate, bool has_workspace);

}  // namespace jaxdnn::attention
