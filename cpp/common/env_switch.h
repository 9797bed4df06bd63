// Environment switches for A/B runs on a GPU (JAXDNN_*): the value of one
// variable, "" when unset. Callers keep the result in a function-local static,
// so each switch is read once, at first use.
#pragma once

#include <cstdlib>
#include <string>

namespace jaxdnn {

inline std::string EnvSwitch(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace jaxdnn
