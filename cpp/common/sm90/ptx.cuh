// Inline-PTX wrappers for Hopper (sm_90a): wgmma, shared-memory matrix
// descriptors, mbarriers, TMA tensor loads, proxy fences, setmaxnreg and named
// barriers. Device code only; every wrapper is one PTX idea.
#pragma once

#include <cstdint>

#include "common/sm80/mma.cuh"
#include "common/smem_addr.cuh"

namespace jaxdnn::sm90 {

// ldmatrix (sm_75+) loads the A fragments of register-sourced wgmma.
using ::jaxdnn::sm80::LdMatrixX4;

// ---- warpgroup MMA ordering ----
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the
// asynchronous wgmma boundaries.
template <int N>
__device__ __forceinline__ void FenceRegs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void FenceRegs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ---- shared-memory matrix descriptors, 128-byte swizzle ----
// A tile stored as rows of 128 bytes (64 16-bit elements), 8-row swizzle atoms
// of 1024 bytes, atom base 1024-byte aligned (base offset field 0).
//  K-major (Q, K: the contracted dim is contiguous): SBO = 1024 (next 8 rows),
//    LBO unused (1); stepping k by 16 elements adds 32 bytes to the start.
//  MN-major (V as B of P.V: N = head dim contiguous, K = kv rows): LBO = byte
//    distance between 64-element column blocks, SBO = 1024 (next 8 kv rows);
//    stepping k by 16 rows adds 2048 bytes to the start.
// The descriptor fields shared by every swizzle mode; `layout` is the 2-bit
// layout type (1: 128-byte swizzle, 3: 32-byte swizzle).
__device__ __forceinline__ uint64_t MakeDesc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                             uint64_t layout) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= layout << 62;
  return d;
}

__device__ __forceinline__ uint64_t MakeDescSw128(uint32_t smem_addr, uint32_t lbo_bytes,
                                                  uint32_t sbo_bytes) {
  return MakeDesc(smem_addr, lbo_bytes, sbo_bytes, 1);
}

// The same fields with the 32-byte swizzle (layout type 3): atoms of 8 rows x
// 32 bytes (256 bytes, 256-byte aligned), 16-byte chunk bit 0 ^= row bit 2.
// MN-major: LBO = byte distance between 16-element MN blocks, SBO = between
// 8-row K groups.
__device__ __forceinline__ uint64_t MakeDescSw32(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return MakeDesc(smem_addr, lbo_bytes, sbo_bytes, 3);
}

// ---- wgmma.mma_async: SS = A and B from shared memory (both K-major), RS =
// A from registers, B from shared memory MN-major (tnsp-b 1). The operand
// lists are spelled out once by the macros below; one line instantiates a
// shape (m64 nN k16) and element type.
#define JAXDNN_WG_ACC8(i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define JAXDNN_WG_ACC32 JAXDNN_WG_ACC8(0), JAXDNN_WG_ACC8(8), JAXDNN_WG_ACC8(16), JAXDNN_WG_ACC8(24)
#define JAXDNN_WG_ACC64 \
  JAXDNN_WG_ACC32, JAXDNN_WG_ACC8(32), JAXDNN_WG_ACC8(40), JAXDNN_WG_ACC8(48), JAXDNN_WG_ACC8(56)
#define JAXDNN_WG_ACC128                                                                           \
  JAXDNN_WG_ACC64, JAXDNN_WG_ACC8(64), JAXDNN_WG_ACC8(72), JAXDNN_WG_ACC8(80), JAXDNN_WG_ACC8(88), \
      JAXDNN_WG_ACC8(96), JAXDNN_WG_ACC8(104), JAXDNN_WG_ACC8(112), JAXDNN_WG_ACC8(120)
#define JAXDNN_WG_REGS32                                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define JAXDNN_WG_REGS64                                                            \
  JAXDNN_WG_REGS32                                                                  \
  ","                                                                               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define JAXDNN_WG_REGS128                                                                       \
  JAXDNN_WG_REGS64                                                                              \
  ","                                                                                           \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define JAXDNN_WG_ACC48 JAXDNN_WG_ACC32, JAXDNN_WG_ACC8(32), JAXDNN_WG_ACC8(40)
#define JAXDNN_WG_REGS48 \
  JAXDNN_WG_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define JAXDNN_WG_ACC96 \
  JAXDNN_WG_ACC64, JAXDNN_WG_ACC8(64), JAXDNN_WG_ACC8(72), JAXDNN_WG_ACC8(80), JAXDNN_WG_ACC8(88)
#define JAXDNN_WG_REGS96                                                                                     \
  JAXDNN_WG_REGS64                                                                                           \
  ","                                                                                                        \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,%80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// NACC accumulator registers; the operand numbers after them are spelled
// out per count (SS: desc_a, desc_b, scale_d; RS: a0..a3, desc_b, scale_d).
#define JAXDNN_WGMMA_PAIR(N, NACC, SUFFIX, SS_TAIL, RS_TAIL)                                              \
  __device__ __forceinline__ void WgmmaSS_m64n##N##k16_##SUFFIX(float (&d)[NACC], uint64_t desc_a,        \
                                                                uint64_t desc_b, int scale_d) {           \
    asm volatile("{\n.reg .pred p;\n" SS_TAIL                                                             \
                 : JAXDNN_WG_ACC##NACC                                                                    \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                               \
  }                                                                                                       \
  __device__ __forceinline__ void WgmmaRS_m64n##N##k16_##SUFFIX(float (&d)[NACC], const uint32_t (&a)[4], \
                                                                uint64_t desc_b, int scale_d) {           \
    asm volatile("{\n.reg .pred p;\n" RS_TAIL                                                             \
                 : JAXDNN_WG_ACC##NACC                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                \
  }

#define JAXDNN_WGMMA_N64(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(64, 32, SUFFIX,                                                               \
                    "setp.ne.b32 p, %34, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" JAXDNN_WG_REGS32 \
                    "}, %32, %33, p, 1, 1, 0, 0;\n}\n",                                           \
                    "setp.ne.b32 p, %37, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" JAXDNN_WG_REGS32 \
                    "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n")
#define JAXDNN_WGMMA_N128(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(128, 64, SUFFIX,                                                               \
                    "setp.ne.b32 p, %66, 0;\n"                                                     \
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" JAXDNN_WG_REGS64 \
                    "}, %64, %65, p, 1, 1, 0, 0;\n}\n",                                            \
                    "setp.ne.b32 p, %69, 0;\n"                                                     \
                    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" JAXDNN_WG_REGS64 \
                    "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n")

// Head dim 256: O += P V (128 accumulator registers per thread).
#define JAXDNN_WGMMA_N256(TY, SUFFIX)                                                               \
  JAXDNN_WGMMA_PAIR(256, 128, SUFFIX,                                                               \
                    "setp.ne.b32 p, %130, 0;\n"                                                     \
                    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" JAXDNN_WG_REGS128 \
                    "}, %128, %129, p, 1, 1, 0, 0;\n}\n",                                           \
                    "setp.ne.b32 p, %133, 0;\n"                                                     \
                    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" JAXDNN_WG_REGS128 \
                    "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n")

// Head dims 96 and 192: O += P V over the head dim's own columns (the last
// 64-column panel of 96 half used: the other half is never read).
#define JAXDNN_WGMMA_N96(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(96, 48, SUFFIX,                                                               \
                    "setp.ne.b32 p, %50, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n96k16.f32." TY "." TY " {" JAXDNN_WG_REGS48 \
                    "}, %48, %49, p, 1, 1, 0, 0;\n}\n",                                           \
                    "setp.ne.b32 p, %53, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n96k16.f32." TY "." TY " {" JAXDNN_WG_REGS48 \
                    "}, {%48, %49, %50, %51}, %52, p, 1, 1, 1;\n}\n")
#define JAXDNN_WGMMA_N192(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(192, 96, SUFFIX,                                                               \
                    "setp.ne.b32 p, %98, 0;\n"                                                     \
                    "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {" JAXDNN_WG_REGS96 \
                    "}, %96, %97, p, 1, 1, 0, 0;\n}\n",                                            \
                    "setp.ne.b32 p, %101, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {" JAXDNN_WG_REGS96 \
                    "}, {%96, %97, %98, %99}, %100, p, 1, 1, 1;\n}\n")
JAXDNN_WGMMA_N96("bf16", bf16)
JAXDNN_WGMMA_N96("f16", f16)
JAXDNN_WGMMA_N192("bf16", bf16)
JAXDNN_WGMMA_N192("f16", f16)

JAXDNN_WGMMA_N64("bf16", bf16)
JAXDNN_WGMMA_N128("bf16", bf16)
JAXDNN_WGMMA_N64("f16", f16)
JAXDNN_WGMMA_N128("f16", f16)
JAXDNN_WGMMA_N256("bf16", bf16)
JAXDNN_WGMMA_N256("f16", f16)

// RS with B K-major (tnsp-b 0): S = Q K^T with Q's fragments in registers
// (the forward's kQRegs).
#define JAXDNN_WGMMA_RS_KMAJOR(N, NACC, TY, SUFFIX, REGS, A0, DB, SC)                                       \
  __device__ __forceinline__ void WgmmaRSKm_m64n##N##k16_##SUFFIX(float (&d)[NACC], const uint32_t (&a)[4], \
                                                                  uint64_t desc_b, int scale_d) {           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SC                                                     \
                 ", 0;\n"                                                                                   \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " A0 ", " DB     \
                 ", p, 1, 1, 0;\n}\n"                                                                       \
                 : JAXDNN_WG_ACC##NACC                                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                  \
  }
JAXDNN_WGMMA_RS_KMAJOR(128, 64, "bf16", bf16, JAXDNN_WG_REGS64, "{%64, %65, %66, %67}", "%68", "%69")
JAXDNN_WGMMA_RS_KMAJOR(128, 64, "f16", f16, JAXDNN_WG_REGS64, "{%64, %65, %66, %67}", "%68", "%69")
template <bool kF16>
__device__ __forceinline__ void WgmmaRSKm128(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int s) {
  if constexpr (kF16) {
    WgmmaRSKm_m64n128k16_f16(d, a, b, s);
  } else {
    WgmmaRSKm_m64n128k16_bf16(d, a, b, s);
  }
}

// Dispatch on N and the element type (bf16 or f16).
template <int N, bool kF16>
struct Wgmma;
#define JAXDNN_WGMMA_DISPATCH(N, NACC, F16, SUFFIX)                                                          \
  template <>                                                                                                \
  struct Wgmma<N, F16> {                                                                                     \
    static __device__ __forceinline__ void SS(float (&d)[NACC], uint64_t a, uint64_t b, int s) {             \
      WgmmaSS_m64n##N##k16_##SUFFIX(d, a, b, s);                                                             \
    }                                                                                                        \
    static __device__ __forceinline__ void RS(float (&d)[NACC], const uint32_t (&a)[4], uint64_t b, int s) { \
      WgmmaRS_m64n##N##k16_##SUFFIX(d, a, b, s);                                                             \
    }                                                                                                        \
  };
JAXDNN_WGMMA_DISPATCH(64, 32, false, bf16)
JAXDNN_WGMMA_DISPATCH(128, 64, false, bf16)
JAXDNN_WGMMA_DISPATCH(64, 32, true, f16)
JAXDNN_WGMMA_DISPATCH(128, 64, true, f16)
JAXDNN_WGMMA_DISPATCH(96, 48, false, bf16)
JAXDNN_WGMMA_DISPATCH(96, 48, true, f16)
JAXDNN_WGMMA_DISPATCH(192, 96, false, bf16)
JAXDNN_WGMMA_DISPATCH(192, 96, true, f16)
JAXDNN_WGMMA_DISPATCH(256, 128, false, bf16)
JAXDNN_WGMMA_DISPATCH(256, 128, true, f16)

// ---- Head dims 192 and 256 backward (attention/sm90/backward_dkdv_wide.cuh) ----
// m64n32k16 (S^T / dP^T halves and the dQ kernel's 32-key scores: 16
// accumulator registers), and SS with B MN-major (tnsp-b 1: dV += P^T dO and
// dK += dS^T Q with P^T / dS^T shared through shared memory).
#define JAXDNN_WG_ACC16 JAXDNN_WG_ACC8(0), JAXDNN_WG_ACC8(8)
#define JAXDNN_WG_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define JAXDNN_WGMMA_N32(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(32, 16, SUFFIX,                                                               \
                    "setp.ne.b32 p, %18, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {" JAXDNN_WG_REGS16 \
                    "}, %16, %17, p, 1, 1, 0, 0;\n}\n",                                           \
                    "setp.ne.b32 p, %21, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {" JAXDNN_WG_REGS16 \
                    "}, {%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n")
JAXDNN_WGMMA_N32("bf16", bf16)
JAXDNN_WGMMA_N32("f16", f16)
JAXDNN_WGMMA_DISPATCH(32, 16, false, bf16)
JAXDNN_WGMMA_DISPATCH(32, 16, true, f16)

// ---- Fused backward with 80-query steps (head dim 128): m64n80k16 (S^T /
// dP^T over 80 queries: 40 accumulator registers).
#define JAXDNN_WG_ACC40 JAXDNN_WG_ACC32, JAXDNN_WG_ACC8(32)
#define JAXDNN_WG_REGS40 JAXDNN_WG_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define JAXDNN_WGMMA_N80(TY, SUFFIX)                                                              \
  JAXDNN_WGMMA_PAIR(80, 40, SUFFIX,                                                               \
                    "setp.ne.b32 p, %42, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n80k16.f32." TY "." TY " {" JAXDNN_WG_REGS40 \
                    "}, %40, %41, p, 1, 1, 0, 0;\n}\n",                                           \
                    "setp.ne.b32 p, %45, 0;\n"                                                    \
                    "wgmma.mma_async.sync.aligned.m64n80k16.f32." TY "." TY " {" JAXDNN_WG_REGS40 \
                    "}, {%40, %41, %42, %43}, %44, p, 1, 1, 1;\n}\n")
JAXDNN_WGMMA_N80("bf16", bf16)
JAXDNN_WGMMA_N80("f16", f16)
JAXDNN_WGMMA_DISPATCH(80, 40, false, bf16)
JAXDNN_WGMMA_DISPATCH(80, 40, true, f16)

// SS, A K-major and B MN-major: WgmmaSSBt_m64nNk16_<type>.
#define JAXDNN_WGMMA_SS_BT(N, NACC, TY, SUFFIX, REGS, DA, DB, SC)                                       \
  __device__ __forceinline__ void WgmmaSSBt_m64n##N##k16_##SUFFIX(float (&d)[NACC], uint64_t desc_a,    \
                                                                  uint64_t desc_b, int scale_d) {       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SC                                                 \
                 ", 0;\n"                                                                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " DA ", " DB \
                 ", p, 1, 1, 0, 1;\n}\n"                                                                \
                 : JAXDNN_WG_ACC##NACC                                                                  \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                             \
  }
JAXDNN_WGMMA_SS_BT(128, 64, "bf16", bf16, JAXDNN_WG_REGS64, "%64", "%65", "%66")
JAXDNN_WGMMA_SS_BT(128, 64, "f16", f16, JAXDNN_WG_REGS64, "%64", "%65", "%66")
JAXDNN_WGMMA_SS_BT(192, 96, "bf16", bf16, JAXDNN_WG_REGS96, "%96", "%97", "%98")
JAXDNN_WGMMA_SS_BT(192, 96, "f16", f16, JAXDNN_WG_REGS96, "%96", "%97", "%98")
template <int N, bool kF16>
struct WgmmaBt;
#define JAXDNN_WGMMA_BT_DISPATCH(N, NACC, F16, SUFFIX)                                           \
  template <>                                                                                    \
  struct WgmmaBt<N, F16> {                                                                       \
    static __device__ __forceinline__ void SS(float (&d)[NACC], uint64_t a, uint64_t b, int s) { \
      WgmmaSSBt_m64n##N##k16_##SUFFIX(d, a, b, s);                                               \
    }                                                                                            \
  };
JAXDNN_WGMMA_BT_DISPATCH(128, 64, false, bf16)
JAXDNN_WGMMA_BT_DISPATCH(128, 64, true, f16)
JAXDNN_WGMMA_BT_DISPATCH(192, 96, false, bf16)
JAXDNN_WGMMA_BT_DISPATCH(192, 96, true, f16)
#undef JAXDNN_WGMMA_BT_DISPATCH

// ---- mbarrier ----
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(bytes)
               : "memory");
}
// Raises the phase's expected transaction bytes without arriving (the
// arrivals come separately, so the phase cannot complete before them).
__device__ __forceinline__ void MbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddr(bar)) : "memory");
}
__device__ __forceinline__ bool MbarTryWait(uint32_t bar_addr, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar_addr), "r"(parity)
      : "memory");
  return ok != 0;
}
// Waits until the phase of the given parity has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = SmemAddr(bar);
#if defined(JAXDNN_SM90_HANG_TRAP)
  // Debug builds: turn a deadlock into a launch error instead of a hang.
  long long spins = 0;
  while (!MbarTryWait(a, parity)) {
    if (++spins > (1ll << 28)) __trap();
  }
#else
  while (!MbarTryWait(a, parity)) {
  }
#endif
}

// ---- TMA: 4-D tiled tensor load into shared memory, completing on an mbarrier ----
__device__ __forceinline__ void TmaLoad4d(void* smem_dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                          int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(SmemAddr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(SmemAddr(bar))
      : "memory");
}
// kRows sequence rows of one head from a (head_dim, heads, seq, batch) tensor
// map: kPanels boxes of 64 head-dim columns, panel p at tile + p * kRows * 128
// bytes (the 128-byte-swizzled panel layout MakeDescSw128 describes).
template <int kPanels, int kRows>
__device__ __forceinline__ void TmaLoadHeadRows(uint8_t* tile, const void* tmap, uint64_t* bar, int head,
                                                int row, int batch) {
#pragma unroll
  for (int panel = 0; panel < kPanels; ++panel) {
    TmaLoad4d(tile + panel * kRows * 128, tmap, bar, panel * 64, head, row, batch);
  }
}

// ---- clusters of two CTAs sharing K/V loads (TMA multicast) ----
__device__ __forceinline__ uint32_t ClusterCtaRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: release what this thread wrote
// (barrier inits, remote arrivals), acquire what the others wrote.
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrives on the mbarrier at the same shared-memory offset as `bar` in the
// cluster's CTA `cta` (this CTA included). The default .release.cta
// semantics: a consumer releasing a stage it read through wgmma has nothing
// of its own to publish, and .release.cluster made every release wait (the
// d128 forward ran 33% slower with it; docs/perf/attention.md, Standing
// decisions: Two traps).
__device__ __forceinline__ void MbarArriveCluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(SmemAddr(bar)),
      "r"(cta)
      : "memory");
}
// Arrival with cluster-scope release: publishes this thread's earlier
// writes (e.g. StoreSharedRemote) to the CTA that waits on the barrier.
__device__ __forceinline__ void MbarArriveClusterRelease(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(SmemAddr(bar)),
      "r"(cta)
      : "memory");
}
// Waits for the phase of the given parity with cluster-scope acquire (sees
// what the arriving CTA released).
__device__ __forceinline__ void MbarWaitAcquireCluster(uint64_t* bar, uint32_t parity) {
  const uint32_t a = SmemAddr(bar);
  uint32_t ok = 0;
  while (!ok) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(a), "r"(parity)
        : "memory");
  }
}
// Stores a 32-bit value at the same shared-memory offset as `dst` in the
// cluster's CTA `cta`.
__device__ __forceinline__ void StoreSharedRemote(int32_t* dst, uint32_t cta, int32_t value) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "st.shared::cluster.u32 [remote], %2;\n}\n" ::"r"(SmemAddr(dst)),
      "r"(cta), "r"(value)
      : "memory");
}
// TmaLoad4d into the same offset of every CTA in cta_mask, each completing
// the bytes on its own mbarrier at bar's offset.
__device__ __forceinline__ void TmaLoad4dMulticast(void* smem_dst, const void* tmap, uint64_t* bar, int c0,
                                                   int c1, int c2, int c3, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(SmemAddr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(SmemAddr(bar)),
      "h"(cta_mask)
      : "memory");
}
// kRows sequence rows (a slice of a kPanelRows-row tile) multicast to the
// CTAs in cta_mask: panel p at slice + p * kPanelRows * 128 bytes.
template <int kPanels, int kRows, int kPanelRows>
__device__ __forceinline__ void TmaLoadHeadRowsMulticast(uint8_t* slice, const void* tmap, uint64_t* bar,
                                                         int head, int row, int batch, uint16_t cta_mask) {
#pragma unroll
  for (int panel = 0; panel < kPanels; ++panel) {
    TmaLoad4dMulticast(slice + panel * kPanelRows * 128, tmap, bar, panel * 64, head, row, batch, cta_mask);
  }
}

// A TMA store of one box from shared memory (128-byte-swizzled panel) into
// global memory, in this thread's bulk async group; rows outside the tensor
// are not written.
__device__ __forceinline__ void TmaStore4d(const void* tmap, const void* smem_src, int c0, int c1, int c2,
                                           int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(SmemAddr(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void BulkCommitGroup() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's bulk groups still read their
// shared-memory source.
template <int kPending>
__device__ __forceinline__ void BulkWaitGroupRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Waits until this thread's bulk groups are complete (their writes done).
__device__ __forceinline__ void BulkWaitGroupAll() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void PrefetchTmaDescriptor(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// ---- fences, register reallocation, named barriers ----
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int kRegs>
__device__ __forceinline__ void SetMaxNRegInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxNRegDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- used by the fused attention backward: SS wgmma with both operands
// MN-major, bulk shared->global stores and reductions, gpu-scope flags ----
// wgmma m64nNk16, A and B both from shared memory, both MN-major
// (imm-trans-a = imm-trans-b = 1; 16-bit types only): N = 64 (dQ of the
// 64-query steps), N = 80 (dQ^T = K^T dS^T, kFusedOptQ80) and N = 96 (dQ at
// head dim 96). IA/IB/IS are the
// descriptor and scale operand numbers after the N/2 accumulators.
#define JAXDNN_WGMMA_SS_TT(N, REGS, ACC, IA, IB, IS, TY, SUFFIX)                                      \
  __device__ __forceinline__ void WgmmaSSTT_m64n##N##k16_##SUFFIX(float (&d)[N / 2], uint64_t desc_a, \
                                                                  uint64_t desc_b, int scale_d) {     \
    asm volatile(                                                                                     \
        "{\n.reg .pred p;\n"                                                                          \
        "setp.ne.b32 p, %" IS                                                                         \
        ", 0;\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" IA ", %" IB      \
        ", p, 1, 1, 1, 1;\n}\n"                                                                       \
        : ACC                                                                                         \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                    \
  }
JAXDNN_WGMMA_SS_TT(64, JAXDNN_WG_REGS32, JAXDNN_WG_ACC32, "32", "33", "34", "bf16", bf16)
JAXDNN_WGMMA_SS_TT(64, JAXDNN_WG_REGS32, JAXDNN_WG_ACC32, "32", "33", "34", "f16", f16)
JAXDNN_WGMMA_SS_TT(80, JAXDNN_WG_REGS40, JAXDNN_WG_ACC40, "40", "41", "42", "bf16", bf16)
JAXDNN_WGMMA_SS_TT(80, JAXDNN_WG_REGS40, JAXDNN_WG_ACC40, "40", "41", "42", "f16", f16)
JAXDNN_WGMMA_SS_TT(96, JAXDNN_WG_REGS48, JAXDNN_WG_ACC48, "48", "49", "50", "bf16", bf16)
JAXDNN_WGMMA_SS_TT(96, JAXDNN_WG_REGS48, JAXDNN_WG_ACC48, "48", "49", "50", "f16", f16)
#undef JAXDNN_WGMMA_SS_TT

template <bool kF16>
__device__ __forceinline__ void WgmmaSSTT64(float (&d)[32], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kF16) {
    WgmmaSSTT_m64n64k16_f16(d, a, b, scale_d);
  } else {
    WgmmaSSTT_m64n64k16_bf16(d, a, b, scale_d);
  }
}

template <bool kF16>
__device__ __forceinline__ void WgmmaSSTT80(float (&d)[40], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kF16) {
    WgmmaSSTT_m64n80k16_f16(d, a, b, scale_d);
  } else {
    WgmmaSSTT_m64n80k16_bf16(d, a, b, scale_d);
  }
}

// By N: 64 (WgmmaSSTT64) or 96 (the fused backward's dQ at head dim 96).
template <int N, bool kF16>
__device__ __forceinline__ void WgmmaSSTT(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
  static_assert(N == 64 || N == 96, "N 64 or 96");
  if constexpr (N == 64) {
    WgmmaSSTT64<kF16>(d, a, b, scale_d);
  } else if constexpr (kF16) {
    WgmmaSSTT_m64n96k16_f16(d, a, b, scale_d);
  } else {
    WgmmaSSTT_m64n96k16_bf16(d, a, b, scale_d);
  }
}

// Bulk (non-tensor) async copy global -> this CTA's shared memory, its bytes
// completing on `bar` (16-byte aligned ends, a multiple of 16 bytes).
__device__ __forceinline__ void BulkLoadG2S(void* smem_dst, const void* gsrc, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          SmemAddr(smem_dst)),
      "l"(gsrc), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}

// Bulk (non-tensor) async copies shared -> global, bulk-group completion.
__device__ __forceinline__ void BulkStoreS2G(float* gdst, uint32_t smem_src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gdst), "r"(smem_src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BulkReduceAddF32S2G(float* gdst, uint32_t smem_src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst),
               "r"(smem_src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void FenceProxyAsyncGlobal() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ int LdAcquireGpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StReleaseGpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void StShared32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void StShared64F(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ float2 LdShared64F(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

}  // namespace jaxdnn::sm90
