// What the sm90 forward keeps in its FFI workspace (host side, shared by the
// launcher and attention/plan.cc): the dynamic tile scheduler's claim counter
// in the leading 64 floats (256 bytes keep what follows aligned), then, with
// segment ids, the (min, max) segment id of every 64 keys and 64 query rows.
#pragma once

#include <cstdint>

namespace jaxdnn::attention {

constexpr int64_t kSm90TileCounterElems = 64;

namespace sm90 {

// Range groups per batch row of a sequence of `len`: two per 128 positions.
inline int64_t SegmentRangeGroups(int64_t len) { return 2 * ((len + 127) / 128); }

// int32 elements of the segment ranges (int2 pairs) for a call.
inline int64_t SegmentRangeInts(int64_t batch, int64_t q_len, int64_t kv_len) {
  return 2 * batch * (SegmentRangeGroups(q_len) + SegmentRangeGroups(kv_len));
}

}  // namespace sm90
}  // namespace jaxdnn::attention
