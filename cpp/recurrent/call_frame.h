// The recurrences' call frames, read and checked the same way for the CPU
// and CUDA handlers: the operands' shapes against problem.h's, then the
// kernel's argument struct.
#pragma once

#include <cstdint>

#include "common/ffi_util.h"
#include "recurrent/problem.h"

namespace jaxdnn::recurrent {

using F32 = ffi::Buffer<ffi::F32>;
using S32 = ffi::Buffer<ffi::S32>;
using OutF32 = ffi::ResultBuffer<ffi::F32>;

ffi::ErrorOr<RnnFwdArgs> ReadFwdCall(const char* op, int32_t mode, F32 gx, F32 w_hh, F32 b_hh, F32 h0, F32 c0,
                                     S32 lengths, OutF32 out, OutF32 h_n, OutF32 c_n, OutF32 saved,
                                     OutF32 c_seq);

ffi::ErrorOr<RnnBwdArgs> ReadBwdCall(const char* op, int32_t mode, F32 dout, F32 dh_n, F32 dc_n, F32 w_hh,
                                     F32 h0, F32 c0, S32 lengths, F32 out, F32 saved, F32 c_seq, OutF32 dgx,
                                     OutF32 dh0, OutF32 dc0);

// The handlers' bindings (operands, then results; `mode` and `weights`
// attributes; the CUDA ones add a workspace result and the stream).
#define JAXDNN_RNN_FWD_ARGS(B)                    \
  B.Arg<::jaxdnn::recurrent::F32>()               \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::S32>()            \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>()

#define JAXDNN_RNN_BWD_ARGS(B)                    \
  B.Arg<::jaxdnn::recurrent::F32>()               \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::S32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Arg<::jaxdnn::recurrent::F32>()            \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>() \
      .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>()

}  // namespace jaxdnn::recurrent
