// How the sm90 convolutions carve XLA's workspace: pieces 256-byte aligned.
#pragma once

#include <cstddef>

namespace jaxdnn::conv::sm90 {

constexpr size_t kWsAlign = 256;
inline size_t RoundUp(size_t n) { return (n + kWsAlign - 1) / kWsAlign * kWsAlign; }

}  // namespace jaxdnn::conv::sm90
