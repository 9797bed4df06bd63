// What a family exports to the Python extension modules: its XLA FFI targets
// by name, and the plan queries Python asks at trace time (workspace sizes),
// answered by the same C++ functions the launchers run. Each family defines
// `FamilyExports CpuExports()` (in its ffi_cpu.cc) and `FamilyExports
// CudaExports()` (in its ffi_cuda.cc); cpp/bindings loops over the families
// CMake lists.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/ffi_util.h"
#include "xla/ffi/api/c_api.h"

namespace jaxdnn {

// A plan query's arguments: named integers (shapes, dtype codes, flags).
using QueryArgs = std::map<std::string, int64_t>;

struct FfiTarget {
  const char* name;
  XLA_FFI_Handler* handler;
};

struct PlanQuery {
  const char* name;
  int64_t (*answer)(const QueryArgs&);
};

struct FamilyExports {
  std::vector<FfiTarget> targets;
  std::vector<PlanQuery> queries;
};

// The argument `key` of a plan query; a missing one is a bug on the Python side.
inline int64_t QueryArg(const QueryArgs& args, const char* key) {
  auto it = args.find(key);
  if (it == args.end()) throw std::invalid_argument(std::string("plan query: missing argument ") + key);
  return it->second;
}

// The dtype codes plan queries use (jaxdnn/_extension.py: DTYPE_CODES).
inline ffi::DataType DataTypeFromCode(int64_t code) {
  switch (code) {
    case 0: return ffi::DataType::F32;
    case 1: return ffi::DataType::BF16;
    case 2: return ffi::DataType::F16;
    default: return ffi::DataType::INVALID;
  }
}

}  // namespace jaxdnn
