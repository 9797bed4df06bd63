// jaxdnn's environment switches (the table is common/switches.def): each
// one's name, type, default, allowed values and meaning, and its value, read
// from the environment once (at the first use of any switch, under C++'s
// thread-safe static initialization) and never again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jaxdnn {

enum class Switch {
#define JAXDNN_SWITCH(id, name, type, def, allowed, meaning) k##id,
#include "common/switches.def"
#undef JAXDNN_SWITCH
  kCount
};

struct SwitchSpec {
  const char* name;
  const char* type;  // "bool", "int" or "choice"
  const char* default_value;
  const char* allowed;
  const char* meaning;
};

// Every switch, in table order.
const std::vector<SwitchSpec>& SwitchTable();

// The value in force: the variable's text when it is one of `allowed`, else the default.
const std::string& SwitchText(Switch s);
// A bool switch is on ("1").
bool SwitchOn(Switch s);
// An int switch's value, or a choice switch's number (`fallback` for a word such as "auto").
int64_t SwitchInt(Switch s, int64_t fallback = 0);
// True when a choice switch holds its default ("auto" and the like).
bool SwitchIsDefault(Switch s);
// The value in force of the switch called `name` ("" for no such switch): for tests and docs.
std::string SwitchValueText(const std::string& name);

}  // namespace jaxdnn
