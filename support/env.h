// Settings read from the environment, one parser for all of them (the FUSEC_* switches of
// codegen and the runtime, the job's WORLD_SIZE / RANK). Unset or empty (`NAME=`, the shell's
// way of clearing one) is the fallback; a value not of the form asked for is an error naming
// the variable and the value, so a mistyped setting (FUSEC_ROW_SHARED=yes) is never silently
// the default.
#pragma once
#include <cstdint>

namespace fusec {

// Whether the variable is set to something (not unset, not empty).
bool envSet(const char* name);
// A whole number from 0 to `max`, decimal digits only.
int64_t envCount(const char* name, int64_t fallback, int64_t max);
// 0 or 1.
bool envSwitch(const char* name, bool fallback);
// An integer from `lo` to `hi`, an optional sign and decimal digits.
int64_t envInt(const char* name, int64_t fallback, int64_t lo, int64_t hi);
// A number above 0 (seconds, say), as strtod reads it.
double envPositive(const char* name, double fallback);

}  // namespace fusec
