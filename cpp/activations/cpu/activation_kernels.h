// CPU kernels of the activations family (formulas in activations/problem.h).
#pragma once

#include "activations/problem.h"

namespace jaxdnn::activations {

ffi::Error BiasActFwdCpu(const BiasActFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error BiasActBwdCpu(const BiasActBwdArgs& p, ffi::ThreadPool* pool);
ffi::Error GluFwdCpu(const GluFwdArgs& p, ffi::ThreadPool* pool);
ffi::Error GluBwdCpu(const GluBwdArgs& p, ffi::ThreadPool* pool);

}  // namespace jaxdnn::activations
