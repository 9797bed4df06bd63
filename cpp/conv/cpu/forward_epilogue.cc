#include "conv/cpu/forward_epilogue.h"

#include "common/activation.h"
#include "common/cpu_dispatch.h"

namespace jaxdnn::conv {

void StoreForwardOutputs(const ConvFwdArgs& p, int64_t base, const float* acc, int64_t count) {
  const int64_t cout = p.g.out_channels;
  ByAct(p.e.act, [&](auto act) {
    constexpr Act A = decltype(act)::value;
    for (int64_t k = 0; k < count; ++k) {
      float z = p.e.alpha * acc[k];
      if (p.bias) z += LoadAsFloat(p.bias, p.bias_dtype, k % cout);
      if (p.residual) z += p.e.beta * LoadAsFloat(p.residual, p.residual_dtype, base + k);
      StoreFromFloat(p.y, p.out_dtype, base + k, Apply<A>(z, p.e.act_param));
      if (p.z) StoreFromFloat(p.z, p.out_dtype, base + k, z);
    }
  });
}

}  // namespace jaxdnn::conv
