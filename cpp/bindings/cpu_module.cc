// Python module _jaxdnn_cpu: the CPU FFI targets, by name.
#include <nanobind/nanobind.h>

#include "bindings/register.h"
#include "norms/norm_ffi.h"

namespace nb = nanobind;

NB_MODULE(_jaxdnn_cpu, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jaxdnn_norm_fwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormFwdCpu);
    d["jaxdnn_norm_bwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormBwdCpu);
    return d;
  });
}
