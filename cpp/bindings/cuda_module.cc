// Python module _jaxdnn_cuda: the CUDA FFI targets, by name.
#include <nanobind/nanobind.h>

#include "bindings/register.h"
#include "attention/attention_ffi.h"
#include "norms/norm_ffi.h"

namespace nb = nanobind;

NB_MODULE(_jaxdnn_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jaxdnn_norm_fwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormFwdCuda);
    d["jaxdnn_norm_bwd"] = jaxdnn::HandlerCapsule(jaxdnn::norms::kNormBwdCuda);
    d["jaxdnn_attention_fwd"] = jaxdnn::HandlerCapsule(jaxdnn::attention::kAttentionFwdCuda);
    d["jaxdnn_attention_bwd"] = jaxdnn::HandlerCapsule(jaxdnn::attention::kAttentionBwdCuda);
    return d;
  });
}
