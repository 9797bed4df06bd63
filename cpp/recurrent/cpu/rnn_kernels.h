// The recurrent family's CPU kernels (one direction of one layer).
#pragma once

#include "recurrent/problem.h"

namespace jaxdnn::recurrent {

void RnnFwdCpu(const RnnFwdArgs& p);
void RnnBwdCpu(const RnnBwdArgs& p);

}  // namespace jaxdnn::recurrent
