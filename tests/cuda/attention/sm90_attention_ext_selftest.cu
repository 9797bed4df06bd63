// Standalone self-test of the Hopper (sm_90a) attention forward's extended
// path (cpp/attention/hopper, kExt): padding lengths, causal with q_len !=
// kv_len (bottom-right when q_len < kv_len), sliding windows, softcap, segment
// ids (packed documents and arbitrary ids), fully-masked rows. The fp32
// reference (one warp per query row) decides which pairs take part with the
// library's own attention/mask.h (AllowedKeys, SameSegment, Logit), the rules
// every kernel follows. Outputs are poisoned (0xFF bytes: NaN) before each
// checked launch; every case runs in every kernel variant (0..3, and 8 / 24:
// the dynamic tile scheduler in the default / the L2-chunked longest-first
// tile order, whose claim counter lives in a 64-float workspace
// allocated here and zeroed by the launcher before each launch); rows the
// reference leaves empty must come back as zeros with lse = -inf. Then a few
// timings (median of 20 after 5 warm-ups) of packed documents, with TFLOP/s
// counting only in-document (allowed) pairs, the dynamic scheduler against
// the default variant.
//
// Usage: sm90_attention_ext_selftest [bf16|f16]       checks + timings
//        sm90_attention_ext_selftest bf16 time        the timed cases only,
//          checked and timed in their default variant (A/B rounds)
//        sm90_attention_ext_selftest gate             checks that, with
//          JAXDNN_ATTENTION_SM90_EXT=0, Sm90ForwardSupports refuses the
//          extended cases and still takes the dense ones.
// Exit code 1 on any failure.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention/mask.h"
#include "attention/problem.h"
#include "selftest_reference_forward.cuh"
#include "../common/selftest_util.cuh"
#include "attention/sm90/forward.h"

namespace ja = jaxdnn::attention;
using ja::AttnFwdArgs;

using namespace sm90_selftest;

namespace {

// Segment layouts of a case.
// kBenchDocs: the harness's packed documents (jaxdnn.bench.attention,
// packed_documents: b2 s8192, exponential lengths of mean 1024 from numpy's
// default_rng(0)), the case the issue's packed target is measured on.
enum SegKind { kNoSeg, kPacked, kRandomIds, kPackedShifted, kBenchDocs };

struct Case {
  const char* name;
  int B, Sq, Skv, H, Hk, D;
  bool causal;
  int wl, wr;                   // -1: unbounded
  float softcap;                // 0: none
  float scale_mul;              // scale = scale_mul / sqrt(D)
  std::vector<int> q_lengths;   // empty: none
  std::vector<int> kv_lengths;  // empty: none
  SegKind seg;
  int mean_doc;    // packed documents: mean length
  bool timed;      // time it (default variant) and report TFLOP/s
  bool force_ext;  // dense problem through the extended path
};

// Packed documents: ids 0, 1, 2, ... with lengths uniform in [mean/2, 3 mean/2].
std::vector<int32_t> PackedIds(int B, int S, int mean_doc, int first_id) {
  std::vector<int32_t> ids(static_cast<size_t>(B) * S);
  for (int b = 0; b < B; ++b) {
    int id = first_id, left = NextInt(mean_doc / 2, mean_doc * 3 / 2);
    for (int i = 0; i < S; ++i) {
      if (left == 0) {
        ++id;
        left = NextInt(mean_doc / 2, mean_doc * 3 / 2);
      }
      ids[static_cast<size_t>(b) * S + i] = id;
      --left;
    }
  }
  return ids;
}

// The harness's document lengths per batch row (the printout of its
// generator for seq 8192; any other seq repeats the pattern cut to length).
std::vector<int32_t> BenchDocIds(int B, int S) {
  static const std::vector<std::vector<int>> kLengths = {{696, 1044, 20, 16, 563, 1669, 689, 773, 2722},
                                                         {6203, 1989}};
  std::vector<int32_t> ids(static_cast<size_t>(B) * S);
  for (int b = 0; b < B; ++b) {
    const std::vector<int>& len = kLengths[b % kLengths.size()];
    int doc = 0, left = len[0];
    for (int i = 0; i < S; ++i) {
      if (left == 0) {
        ++doc;
        left = len[doc % len.size()];
      }
      ids[static_cast<size_t>(b) * S + i] = doc;
      --left;
    }
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "bf16";
  const bool gate = mode == "gate";
  // "time" as the second argument: only the timed cases, checked in their
  // default variant's kernel and timed in it alone (for A/B rounds of builds).
  const bool time_only = argc > 2 && std::string(argv[2]) == "time";
  const bool f16 = mode == "f16";
  // Before the first Supports() call: the gate mode checks the switch that
  // turns the extended cases off.
  setenv("JAXDNN_ATTENTION_SM90_EXT", gate ? "0" : "1", 1);
  int dev = 0;
  CHECK_CUDA(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs), mode %s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, mode.c_str());

  const float kNo = 0.f;
  std::vector<Case> cases = {
      // name                      B   Sq    Skv   H  Hk  D   causal wl  wr  cap  smul  qlen           kvlen
      // seg        doc  timed  force
      {"dense via ext", 2, 1000, 1000, 3, 1, 128, false, -1, -1, kNo, 1.f, {}, {}, kNoSeg, 0, false, true},
      {"dense causal via ext",
       2,
       1000,
       1000,
       3,
       1,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       true},
      {"lengths",
       3,
       1000,
       1000,
       4,
       2,
       128,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {1000, 513, 0},
       {1000, 700, 5},
       kNoSeg,
       0,
       false,
       false},
      {"lengths causal",
       3,
       1000,
       1000,
       4,
       2,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {1000, 513, 77},
       {1000, 700, 900},
       kNoSeg,
       0,
       false,
       false},
      {"q lengths only",
       2,
       777,
       640,
       2,
       2,
       64,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {1, 600},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"causal BR q<kv", 2, 200, 1000, 4, 2, 128, true, -1, -1, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"causal BR q<kv lengths",
       3,
       300,
       1000,
       2,
       1,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {300, 100, 250},
       {1000, 517, 60},
       kNoSeg,
       0,
       false,
       false},
      {"causal decode-like",
       2,
       7,
       2000,
       4,
       1,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {1999, 1024},
       kNoSeg,
       0,
       false,
       false},
      {"causal q>kv (top-left)",
       2,
       1000,
       300,
       2,
       2,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"causal BR D64", 2, 300, 1111, 4, 4, 64, true, -1, -1, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"window causal 256",
       2,
       2048,
       2048,
       2,
       1,
       128,
       true,
       256,
       0,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"window 100/37", 2, 1500, 1500, 2, 2, 128, false, 100, 37, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"window right only", 1, 1000, 1000, 2, 2, 64, false, -1, 5, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"window empty rows q>kv",
       2,
       1000,
       300,
       2,
       1,
       128,
       false,
       10,
       10,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"window BR q<kv lengths",
       2,
       333,
       1500,
       2,
       1,
       128,
       true,
       200,
       0,
       kNo,
       1.f,
       {333, 129},
       {1500, 700},
       kNoSeg,
       0,
       false,
       false},
      {"softcap 5 (scale x8)",
       2,
       1000,
       1000,
       2,
       2,
       128,
       false,
       -1,
       -1,
       5.f,
       8.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"softcap 30 causal",
       2,
       1000,
       1000,
       2,
       2,
       64,
       true,
       -1,
       -1,
       30.f,
       4.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"segments packed causal",
       2,
       2048,
       2048,
       4,
       2,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       300,
       false,
       false},
      {"segments packed",
       2,
       2048,
       2048,
       4,
       2,
       128,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       200,
       false,
       false},
      {"segments packed D64",
       2,
       1500,
       1500,
       2,
       2,
       64,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       150,
       false,
       false},
      {"segments random ids",
       2,
       1000,
       1000,
       2,
       1,
       128,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kRandomIds,
       0,
       false,
       false},
      {"segments q/kv differ",
       2,
       1000,
       1000,
       2,
       1,
       128,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPackedShifted,
       250,
       false,
       false},
      {"segments+lengths+window+cap",
       2,
       1200,
       1200,
       2,
       2,
       128,
       true,
       300,
       0,
       20.f,
       2.f,
       {1200, 801},
       {1100, 801},
       kPacked,
       400,
       false,
       false},
      {"segments BR q<kv",
       2,
       500,
       1500,
       2,
       2,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       350,
       false,
       false},
      // Head dim 256 (64-key blocks: the votes and segment slots cover 64 keys).
      {"D256 dense via ext",
       2,
       1000,
       1000,
       3,
       1,
       256,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       true},
      {"D256 dense causal via ext",
       1,
       1537,
       1537,
       4,
       2,
       256,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       true},
      {"D256 lengths causal",
       3,
       1000,
       1000,
       4,
       2,
       256,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {1000, 513, 1},
       {1000, 700, 7},
       kNoSeg,
       0,
       false,
       false},
      {"D256 causal BR q<kv", 2, 7, 1537, 4, 1, 256, true, -1, -1, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"D256 causal q>kv", 2, 1000, 300, 2, 2, 256, true, -1, -1, kNo, 1.f, {}, {}, kNoSeg, 0, false, false},
      {"D256 window 100/37",
       2,
       1500,
       1500,
       2,
       1,
       256,
       false,
       100,
       37,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"D256 softcap 30 causal",
       2,
       1000,
       1000,
       2,
       2,
       256,
       true,
       -1,
       -1,
       30.f,
       4.f,
       {},
       {},
       kNoSeg,
       0,
       false,
       false},
      {"D256 segments packed causal",
       2,
       2048,
       2048,
       4,
       2,
       256,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       300,
       false,
       false},
      {"D256 segments random ids",
       2,
       1000,
       1000,
       2,
       1,
       256,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kRandomIds,
       0,
       false,
       false},
      {"D256 segs+len+window+cap",
       2,
       1200,
       1200,
       2,
       2,
       256,
       true,
       300,
       0,
       20.f,
       2.f,
       {1200, 801},
       {1100, 801},
       kPacked,
       400,
       false,
       false},
      // timings (also checked)
      {"T bench docs causal",
       2,
       8192,
       8192,
       16,
       16,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kBenchDocs,
       0,
       true,
       false},
      {"T packed docs causal",
       2,
       8192,
       8192,
       16,
       16,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       1024,
       true,
       false},
      {"T packed docs",
       2,
       8192,
       8192,
       16,
       16,
       128,
       false,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       1024,
       true,
       false},
      {"T dense causal via ext",
       2,
       8192,
       8192,
       16,
       16,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       true,
       true},
      {"T dense causal (dense)",
       2,
       8192,
       8192,
       16,
       16,
       128,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       true,
       false},
      {"T window 1024 causal",
       2,
       8192,
       8192,
       16,
       16,
       128,
       true,
       1023,
       0,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       true,
       false},
      {"T D256 packed docs causal",
       2,
       8192,
       8192,
       16,
       16,
       256,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kPacked,
       1024,
       true,
       false},
      {"T D256 dense causal via ext",
       2,
       8192,
       8192,
       16,
       16,
       256,
       true,
       -1,
       -1,
       kNo,
       1.f,
       {},
       {},
       kNoSeg,
       0,
       true,
       true},
  };

  if (gate) {
    // With JAXDNN_ATTENTION_SM90_EXT=0: dense cases accepted, extended ones refused.
    bool ok = true;
    for (const Case& c : cases) {
      AttnFwdArgs a{};
      a.shape = {c.B, c.Sq, c.Skv, c.H, c.Hk, c.D};
      a.dtype = jaxdnn::ffi::DataType::BF16;
      static int32_t dummy_dev_ptr_storage[4];
      a.q = a.k = a.v = a.out = reinterpret_cast<void*>(0x100000);
      a.lse = reinterpret_cast<float*>(0x100000);
      a.mask_params.scale = 0.1f;
      a.mask_params.causal = c.causal;
      a.mask_params.window_left = c.wl;
      a.mask_params.window_right = c.wr;
      a.mask_params.softcap = c.softcap;
      if (!c.q_lengths.empty()) a.mask_params.q_lengths = dummy_dev_ptr_storage;
      if (!c.kv_lengths.empty()) a.mask_params.kv_lengths = dummy_dev_ptr_storage;
      if (c.seg != kNoSeg) a.mask_params.q_segments = a.mask_params.kv_segments = dummy_dev_ptr_storage;
      const bool dense = c.q_lengths.empty() && c.kv_lengths.empty() && c.seg == kNoSeg && c.wl < 0 &&
                         c.wr < 0 && c.softcap == 0.f && (!c.causal || c.Sq == c.Skv);
      const bool sup = ja::Sm90ForwardSupports(a);
      std::printf("%-30s dense=%d supported=%d %s\n", c.name, dense, sup, sup == dense ? "ok" : "FAIL");
      ok = ok && sup == dense;
    }
    std::printf("%s\n", ok ? "GATE PASSED" : "GATE FAILED");
    return ok ? 0 : 1;
  }

  size_t max_q = 0, max_kv = 0, max_lse = 0, max_ids = 0;
  for (const Case& c : cases) {
    max_q = std::max(max_q, static_cast<size_t>(c.B) * c.Sq * c.H * c.D);
    max_kv = std::max(max_kv, static_cast<size_t>(c.B) * c.Skv * c.Hk * c.D);
    max_lse = std::max(max_lse, static_cast<size_t>(c.B) * c.H * c.Sq);
    max_ids = std::max(max_ids, static_cast<size_t>(c.B) * std::max(c.Sq, c.Skv));
  }
  std::printf("generating inputs (%zu q, %zu kv elements)...\n", max_q, max_kv);
  const std::vector<uint16_t> hq = RandomBits(max_q, f16), hk = RandomBits(max_kv, f16),
                              hv = RandomBits(max_kv, f16);
  void *dq, *dk, *dv, *dout;
  float *dlse, *rout, *rlse;
  int32_t *dqlen, *dkvlen, *dqseg, *dkvseg;
  // The workspace: the dynamic scheduler's claim counter (first element, as
  // int32) in 64 floats (SM90_TILE_COUNTER_ELEMS in primitives.py), then room
  // for the segment ranges of the largest case (attention/sm90/segment_ranges.cuh).
  const int64_t kWorkspaceElems = 64 + 4 * static_cast<int64_t>(max_ids) / 64 + 1024;
  float* dworkspace;
  CHECK_CUDA(cudaMalloc(&dq, max_q * 2));
  CHECK_CUDA(cudaMalloc(&dk, max_kv * 2));
  CHECK_CUDA(cudaMalloc(&dv, max_kv * 2));
  CHECK_CUDA(cudaMalloc(&dout, max_q * 2));
  CHECK_CUDA(cudaMalloc(&dlse, max_lse * 4));
  CHECK_CUDA(cudaMalloc(&rout, max_q * 4));
  CHECK_CUDA(cudaMalloc(&rlse, max_lse * 4));
  CHECK_CUDA(cudaMalloc(&dqlen, 64 * 4));
  CHECK_CUDA(cudaMalloc(&dkvlen, 64 * 4));
  CHECK_CUDA(cudaMalloc(&dqseg, max_ids * 4));
  CHECK_CUDA(cudaMalloc(&dkvseg, max_ids * 4));
  CHECK_CUDA(cudaMalloc(&dworkspace, kWorkspaceElems * 4));
  CHECK_CUDA(cudaMemset(dworkspace, 0, kWorkspaceElems * 4));
  CHECK_CUDA(cudaMemcpy(dq, hq.data(), max_q * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dk, hk.data(), max_kv * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, hv.data(), max_kv * 2, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));

  bool all_ok = true;
  std::printf("%-30s %3s %10s %10s %10s %9s %9s %7s %s\n", "case", "var", "out_maxabs", "out_relL2",
              "lse_maxabs", "lse_relL2", "empty_rows", "badinf", "result");
  for (const Case& c : cases) {
    if (time_only && !c.timed) continue;
    AttnFwdArgs a{};
    a.shape.batch = c.B;
    a.shape.q_len = c.Sq;
    a.shape.kv_len = c.Skv;
    a.shape.heads = c.H;
    a.shape.kv_heads = c.Hk;
    a.shape.head_dim = c.D;
    a.dtype = f16 ? jaxdnn::ffi::DataType::F16 : jaxdnn::ffi::DataType::BF16;
    a.q = dq;
    a.k = dk;
    a.v = dv;
    a.workspace = dworkspace;
    a.workspace_elems = kWorkspaceElems;
    ja::AttnMaskParams& m = a.mask_params;
    m.scale = c.scale_mul / std::sqrt(static_cast<float>(c.D));
    m.causal = c.causal;
    m.window_left = c.wl;
    m.window_right = c.wr;
    m.softcap = c.softcap;
    if (!c.q_lengths.empty()) {
      CHECK_CUDA(cudaMemcpy(dqlen, c.q_lengths.data(), c.B * 4, cudaMemcpyHostToDevice));
      m.q_lengths = dqlen;
    }
    if (!c.kv_lengths.empty()) {
      CHECK_CUDA(cudaMemcpy(dkvlen, c.kv_lengths.data(), c.B * 4, cudaMemcpyHostToDevice));
      m.kv_lengths = dkvlen;
    }
    // In-document (allowed) pairs, for the TFLOP/s of the timed cases.
    double pairs = 0;
    if (c.seg != kNoSeg) {
      std::vector<int32_t> qs, ks;
      if (c.seg == kRandomIds) {
        qs.resize(static_cast<size_t>(c.B) * c.Sq);
        ks.resize(static_cast<size_t>(c.B) * c.Skv);
        for (auto& x : qs) x = NextInt(0, 2);
        for (auto& x : ks) x = NextInt(0, 2);
      } else {
        // Packed: q and kv share the layout when the lengths agree; with
        // q_len < kv_len the queries are the last q_len positions (chunked prefill).
        ks = c.seg == kBenchDocs ? BenchDocIds(c.B, c.Skv) : PackedIds(c.B, c.Skv, c.mean_doc, 0);
        qs.resize(static_cast<size_t>(c.B) * c.Sq);
        for (int b = 0; b < c.B; ++b) {
          for (int i = 0; i < c.Sq; ++i) {
            const int src = std::min(c.Skv - 1, std::max(0, i + (c.Skv > c.Sq ? c.Skv - c.Sq : 0)));
            qs[static_cast<size_t>(b) * c.Sq + i] = ks[static_cast<size_t>(b) * c.Skv + src];
          }
        }
        if (c.seg == kPackedShifted) {
          for (auto& x : qs) x += 1;  // query doc d attends key doc d + 1: a different layout
        }
      }
      CHECK_CUDA(cudaMemcpy(dqseg, qs.data(), qs.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dkvseg, ks.data(), ks.size() * 4, cudaMemcpyHostToDevice));
      m.q_segments = dqseg;
      m.kv_segments = dkvseg;
      if (c.timed) {
        ja::AttnMaskParams hm = m;
        hm.q_segments = qs.data();
        hm.kv_segments = ks.data();
        hm.q_lengths = c.q_lengths.empty() ? nullptr : c.q_lengths.data();
        hm.kv_lengths = c.kv_lengths.empty() ? nullptr : c.kv_lengths.data();
        for (int b = 0; b < c.B; ++b) {
          for (int i = 0; i < c.Sq; ++i) {
            const ja::KeyRange kr = ja::AllowedKeys(hm, a.shape, b, i);
            for (int64_t j = kr.lo; j < kr.hi; ++j) pairs += ja::SameSegment(hm, a.shape, b, i, j);
          }
        }
      }
    } else if (c.timed) {
      ja::AttnMaskParams hm = m;
      for (int b = 0; b < c.B; ++b) {
        for (int i = 0; i < c.Sq; ++i) {
          const ja::KeyRange kr = ja::AllowedKeys(hm, a.shape, b, i);
          pairs += double(kr.hi - kr.lo);
        }
      }
    }
    pairs *= c.H;
    a.out = dout;
    a.lse = dlse;
    if (!c.force_ext && !ja::Sm90ForwardSupports(a)) {
      std::printf("%-30s FAIL: Sm90ForwardSupports() is false\n", c.name);
      all_ok = false;
      continue;
    }
    const size_t nq = static_cast<size_t>(c.B) * c.Sq * c.H * c.D;
    const size_t nl = static_cast<size_t>(c.B) * c.H * c.Sq;

    // The reference once per case.
    {
      const int threads = 256;
      const int64_t rows = static_cast<int64_t>(c.B) * c.H * c.Sq;
      const int blocks = static_cast<int>((rows * 32 + threads - 1) / threads);
      if (f16) {
        ReferenceFwd<__half>
            <<<blocks, threads, 0, stream>>>(static_cast<const __half*>(dq), static_cast<const __half*>(dk),
                                             static_cast<const __half*>(dv), rout, rlse, a.shape, m);
      } else {
        ReferenceFwd<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(dq), static_cast<const __nv_bfloat16*>(dk),
            static_cast<const __nv_bfloat16*>(dv), rout, rlse, a.shape, m);
      }
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    std::vector<float> hro(nq), hrl(nl);
    CHECK_CUDA(cudaMemcpy(hro.data(), rout, nq * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hrl.data(), rlse, nl * 4, cudaMemcpyDeviceToHost));
    long long empty_rows = 0;
    for (size_t i = 0; i < nl; ++i) empty_rows += std::isinf(hrl[i]) && hrl[i] < 0;

    const std::vector<int> check_vars =
        time_only ? std::vector<int>{c.force_ext ? 1 : 24} : std::vector<int>{0, 1, 2, 3, 8, 24};
    for (int var : check_vars) {
      const int launch_var = var + (c.force_ext ? 4 : 0);
      CHECK_CUDA(cudaMemsetAsync(dout, 0xFF, nq * 2, stream));
      CHECK_CUDA(cudaMemsetAsync(dlse, 0xFF, nl * 4, stream));
      CHECK_CUDA(ja::LaunchAttentionFwdSm90Variant(a, stream, launch_var));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      std::vector<uint16_t> gout(nq);
      std::vector<float> glse(nl);
      CHECK_CUDA(cudaMemcpy(gout.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(glse.data(), dlse, nl * 4, cudaMemcpyDeviceToHost));
      double out_max = 0, out_l2 = 0, out_ref = 0, lse_max = 0, lse_l2 = 0, lse_ref = 0;
      long long nonfinite = 0, bad_inf = 0;
      for (size_t i = 0; i < nq; ++i) {
        const float g = HostToF(gout[i], f16);
        if (!std::isfinite(g)) {
          ++nonfinite;
          continue;
        }
        const double d = static_cast<double>(g) - hro[i];
        out_max = std::max(out_max, std::fabs(d));
        out_l2 += d * d;
        out_ref += static_cast<double>(hro[i]) * hro[i];
      }
      for (size_t i = 0; i < nl; ++i) {
        const bool ref_empty = std::isinf(hrl[i]) && hrl[i] < 0;
        const bool got_empty = std::isinf(glse[i]) && glse[i] < 0;
        if (std::isnan(glse[i])) {
          ++nonfinite;
          continue;
        }
        if (ref_empty != got_empty) {
          ++bad_inf;
          continue;
        }
        if (ref_empty) continue;
        const double d = static_cast<double>(glse[i]) - hrl[i];
        lse_max = std::max(lse_max, std::fabs(d));
        lse_l2 += d * d;
        lse_ref += static_cast<double>(hrl[i]) * hrl[i];
      }
      out_l2 = std::sqrt(out_l2 / std::max(out_ref, 1e-30));
      lse_l2 = std::sqrt(lse_l2 / std::max(lse_ref, 1e-30));
      const bool ok = nonfinite == 0 && bad_inf == 0 && out_l2 <= 1e-2 && out_max <= 5e-2 && lse_l2 <= 1e-3 &&
                      lse_max <= 5e-2;
      std::printf("%-30s %3d %10.3g %10.3g %10.3g %9.3g %9lld %7lld %s%s\n", c.name, launch_var, out_max,
                  out_l2, lse_max, lse_l2, empty_rows, bad_inf, ok ? "PASS" : "FAIL",
                  nonfinite ? " (non-finite outputs)" : "");
      std::fflush(stdout);
      all_ok = all_ok && ok;
    }

    if (c.timed) {
      const int var = c.force_ext ? 4 + (c.causal ? 1 : 3) : ja::kSm90DefaultVariant;
      for (int i = 0; i < 5; ++i) CHECK_CUDA(ja::LaunchAttentionFwdSm90Variant(a, stream, var));
      const int dyn = c.force_ext ? 12 : 8;
      double default_tflops = 0;
      const std::vector<int> time_vars =
          time_only ? std::vector<int>{var}
                    : std::vector<int>{
                          var, c.force_ext ? 4 : 0, c.force_ext ? 5 : 1, c.force_ext ? 7 : 3, dyn, dyn + 16};
      for (int tv : time_vars) {
        std::vector<float> ms(20);
        for (int i = 0; i < 20; ++i) {
          CHECK_CUDA(cudaEventRecord(e0, stream));
          CHECK_CUDA(ja::LaunchAttentionFwdSm90Variant(a, stream, tv));
          CHECK_CUDA(cudaEventRecord(e1, stream));
          CHECK_CUDA(cudaEventSynchronize(e1));
          CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
        }
        std::sort(ms.begin(), ms.end());
        const double med = 0.5 * (ms[9] + ms[10]);
        const double tflops = 4.0 * c.D * pairs / (med * 1e-3) / 1e12;
        if (tv == var) default_tflops = tflops;
        std::printf("  timing %-28s variant %2d: %8.3f ms  %7.1f TFLOP/s (allowed pairs only: %.3g)", c.name,
                    tv, med, tflops, pairs);
        if (tv == dyn || tv == dyn + 16) std::printf("  dynamic/default %.3fx", tflops / default_tflops);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  std::printf("%s\n", all_ok ? "ALL PASSED" : "SOME FAILED");
  return all_ok ? 0 : 1;
}
