// Reads the switch table's variables once and validates them against `allowed`.
#include "common/switches.h"

#include <cstdlib>

namespace jaxdnn {
namespace {

// Whether `value` is one of `allowed`'s '|'-separated items, an item "lo..hi"
// admitting any number in [lo, hi].
bool Allowed(const std::string& value, const std::string& allowed) {
  if (value.empty()) return false;
  size_t start = 0;
  while (start <= allowed.size()) {
    size_t end = allowed.find('|', start);
    if (end == std::string::npos) end = allowed.size();
    const std::string item = allowed.substr(start, end - start);
    const size_t dots = item.find("..");
    if (dots == std::string::npos) {
      if (item == value) return true;
    } else {
      char* parsed = nullptr;
      const double v = std::strtod(value.c_str(), &parsed);
      if (parsed != value.c_str() && *parsed == '\0') {
        const double lo = std::strtod(item.substr(0, dots).c_str(), nullptr);
        const double hi = std::strtod(item.substr(dots + 2).c_str(), nullptr);
        if (v >= lo && v <= hi) return true;
      }
    }
    start = end + 1;
  }
  return false;
}

const std::vector<std::string>& Values() {
  static const std::vector<std::string> values = [] {
    std::vector<std::string> v;
    for (const SwitchSpec& s : SwitchTable()) {
      const char* env = std::getenv(s.name);
      v.push_back(env != nullptr && Allowed(env, s.allowed) ? std::string(env)
                                                            : std::string(s.default_value));
    }
    return v;
  }();
  return values;
}

}  // namespace

const std::vector<SwitchSpec>& SwitchTable() {
  static const std::vector<SwitchSpec> table = {
#define JAXDNN_SWITCH(id, name, type, def, allowed, meaning) {name, type, def, allowed, meaning},
#include "common/switches.def"
#undef JAXDNN_SWITCH
  };
  return table;
}

const std::string& SwitchText(Switch s) { return Values()[static_cast<size_t>(s)]; }

bool SwitchOn(Switch s) { return SwitchText(s) == "1"; }

int64_t SwitchInt(Switch s, int64_t fallback) {
  const std::string& v = SwitchText(s);
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  return end != v.c_str() && *end == '\0' ? static_cast<int64_t>(n) : fallback;
}

bool SwitchIsDefault(Switch s) {
  return SwitchText(s) == SwitchTable()[static_cast<size_t>(s)].default_value;
}

std::string SwitchValueText(const std::string& name) {
  const auto& table = SwitchTable();
  for (size_t i = 0; i < table.size(); ++i) {
    if (name == table[i].name) return Values()[i];
  }
  return "";
}

}  // namespace jaxdnn
