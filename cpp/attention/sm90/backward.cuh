// Hopper (sm_90a) attention backward: head dim 64, 96 (the 128 kernels over
// 96 columns), 128, 192 or 256 (their dK/dV kernel splits the head dim or
// the operands over the consumers, attention/sm90/backward_dkdv_wide.cuh),
// bf16 or f16; no
// bias/mask/dropout/dlse. Deterministic: no atomics, every sum has a fixed
// order. The dense case is below; padding lengths, bottom-right causal, a
// sliding window, softcap and segment ids go through the dK/dV and dQ
// kernels' extended path (template flag kExt, attention/sm90/backward_mask.cuh), which
// visits only the blocks the mask leaves (band + segment votes).
//
// Three kernels (plus a fixed-order GQA reduction when heads > kv_heads):
//  1. AttnBwdDeltaKernel: delta[b,h,i] = sum_d dout * out (float32).
//  2. AttnBwdDkDvSm90Kernel: one CTA per (128-key block, query head, batch);
//     warpgroup 0 = producer (K, V once; Q, dO blocks of 64 queries plus their
//     lse*log2e and delta into a kStages ring), warpgroups 1, 2 = consumers of
//     64 keys each. Per query block, all wgmma:
//        S^T  = K Q^T          (A = K smem, B = Q smem, both K-major)
//        P^T  = exp2(S^T * scale*log2e - lse*log2e)
//        dP^T = V dO^T         (A = V smem, B = dO smem, K-major)
//        dV  += P^T dO         (A = P^T registers, B = dO MN-major)
//        dS^T = P^T (dP^T - delta)
//        dK  += dS^T Q         (A = dS^T registers, B = Q MN-major)
//     Epilogue: dK *= scale; dk/dv in the data type (one query head per kv
//     head), or float32 per-query-head partials in the workspace (GQA).
//  3. AttnBwdDqSm90Kernel: one CTA per (128-query block, head, batch), like the
//     forward: Q, dO once, K, V blocks of kBlockN keys in a 2-stage ring;
//     S = Q K^T, P, dP = dO V^T, dS, dQ += dS K (B = K MN-major); dq *= scale.
#pragma once

#include "attention/sm90/backward_common.cuh"
#include "attention/sm90/backward_prepost.cuh"
#include "attention/sm90/backward_dkdv.cuh"
#include "attention/sm90/backward_dq.cuh"
#include "attention/sm90/backward_dkdv_wide.cuh"
