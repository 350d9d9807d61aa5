// The CPU plugin's error handling is the shared plugin support's.
#pragma once
#include "halo/plugin_support/errors.h"

namespace halo::cpu {
using namespace halo::plugin;
}  // namespace halo::cpu
