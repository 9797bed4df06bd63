// Helpers for decoding an FFI call frame in order, shared by every family's
// decoder: the next operand/result (with a message naming it when missing)
// and early-return macros for ErrorOr / Error values.
#pragma once

#include <string>

#include "common/ffi_util.h"

namespace jaxdnn {

template <typename List>
ffi::ErrorOr<ffi::AnyBuffer> NextArg(const List& list, size_t& i, const char* op, const char* name) {
  auto b = list.template get<ffi::AnyBuffer>(i++);
  if (!b.has_value()) return ffi::Unexpected(InvalidArg(op, std::string("missing operand ") + name));
  return *b;
}

template <typename List>
ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> NextRet(const List& list, size_t& i, const char* op,
                                                  const char* name) {
  auto b = list.template get<ffi::AnyBuffer>(i++);
  if (!b.has_value()) return ffi::Unexpected(InvalidArg(op, std::string("missing result ") + name));
  return *b;
}

}  // namespace jaxdnn

// `auto var = *expr`, returning the error from the enclosing ErrorOr function instead.
#define JAXDNN_TRY(var, expr)                                          \
  auto var##_or = (expr);                                              \
  if (!var##_or.has_value()) return ffi::Unexpected(var##_or.error()); \
  auto var = *var##_or;

// Returns a failed ffi::Error from the enclosing ErrorOr function.
#define JAXDNN_CHECK(expr)                                   \
  do {                                                       \
    ffi::Error e_ = (expr);                                  \
    if (e_.failure()) return ffi::Unexpected(std::move(e_)); \
  } while (0)
