// Python module _jaxdnn_cpu: the CPU FFI targets, by name.
#include <nanobind/nanobind.h>

#include "bindings/register.h"
#include "attention/attention_ffi.h"
#include "norms/norm_ffi.h"

namespace nb = nanobind;

NB_MODULE(_jaxdnn_cpu, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jaxdnn_norm_fwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormFwdCpu);
    d["jaxdnn_norm_bwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormBwdCpu);
    d["jaxdnn_attention_fwd"] = jaxdnn::HandlerCapsule(jaxdnn::attention::kAttentionFwdCpu);
    d["jaxdnn_attention_bwd"] = jaxdnn::HandlerCapsule(jaxdnn::attention::kAttentionBwdCpu);
    return d;
  });
}
