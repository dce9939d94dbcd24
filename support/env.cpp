#include "support/env.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "ir/error.h"

namespace fusec {
namespace {
// The variable's value, or null when it is unset or empty.
const char* valueOf(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}
}  // namespace

bool envSet(const char* name) { return valueOf(name) != nullptr; }

int64_t envCount(const char* name, int64_t fallback, int64_t max) {
  const char* v = valueOf(name);
  if (!v) return fallback;
  const std::string s(v);
  int64_t n = 0;
  bool ok = true;
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9' && c - '0' <= max && n <= (max - (c - '0')) / 10;  // n * 10 + digit <= max
    if (ok) n = n * 10 + (c - '0');
  }
  if (!ok)
    throw Error(std::string(name) + " must be " + (max == 1 ? "0 or 1" : "a whole number from 0 to " + std::to_string(max)) +
                ", got '" + s + "'");
  return n;
}

bool envSwitch(const char* name, bool fallback) { return envCount(name, fallback ? 1 : 0, 1) != 0; }

int64_t envInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = valueOf(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno || *end || x < lo || x > hi)
    throw Error(std::string(name) + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                ", got '" + v + "'");
  return x;
}

double envPositive(const char* name, double fallback) {
  const char* v = valueOf(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end || !(x > 0)) throw Error(std::string(name) + " must be a number above 0, got '" + v + "'");
  return x;
}

}  // namespace fusec
