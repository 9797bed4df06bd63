// Wraps an FFI handler symbol in the PyCapsule that jax.ffi.register_ffi_target takes.
#pragma once

#include <nanobind/nanobind.h>

#include "xla/ffi/api/c_api.h"

namespace jaxdnn {

template <typename Fn>
nanobind::capsule HandlerCapsule(Fn* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, Fn, XLA_FFI_CallFrame*>,
                "not an XLA FFI handler");
  return nanobind::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace jaxdnn
