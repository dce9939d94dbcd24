// Helpers shared by the unit tests.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace fusec::test {

#ifdef FUSEC_BINARY
// The fusec binary the tests run as a user would: FUSEC_TEST_BINARY where set, else this
// build's. A GPU machine running binaries built elsewhere (scripts/gpu-prebuilt.sh carries
// fusec and the GPU tests, not the build tree FUSEC_BINARY names) sets it.
inline std::string fusecBinary() {
  const char* e = std::getenv("FUSEC_TEST_BINARY");
  return e && *e ? std::string(e) : std::string(FUSEC_BINARY);
}
#endif

// The environment variable `name` set to `value` for one scope (a target switch a test
// compiles under: FUSEC_WGMMA_FUSED_DQ, FUSEC_ROW_SHARED, ...).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (old) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// An empty directory under the system's temp directory, removed with everything in it at
// the end of the scope; `name` plus the pid keeps parallel test processes apart.
struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& name)
      : path((std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string()) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

// Runs a shell command (the caller adds any redirection, e.g. " 2>&1"): its stdout and exit
// code (-1 when it did not exit normally). For the CLI and the reference scripts.
inline std::pair<std::string, int> runCommand(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"<popen failed>", -1};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

inline Type f32(Shape s) { return Type{DType::f32, std::move(s)}; }
inline Type i64(Shape s) { return Type{DType::i64, std::move(s)}; }

// The message of the fusec::Error that `f` throws, or "<no error>".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Floats of magnitude [0.5, 2) x scale with random signs (positive only when asked): never
// zero, so a dropped term or a missed write shows.
inline HostTensor randomNonZero(const Type& t, std::mt19937& rng, double scale = 1, bool positive = false) {
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::bernoulli_distribution neg(0.5);
  HostTensor h = HostTensor::zeros(t);
  for (size_t k = 0; k < h.size(); ++k) {
    const bool minus = !positive && neg(rng);
    h.set(k, (minus ? -scale : scale) * mag(rng));
  }
  return h;
}

// Integers uniform in [lo, hi) (token ids, gather indices).
inline HostTensor randomIndex(const Type& t, std::mt19937& rng, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> d(lo, hi - 1);
  HostTensor h = HostTensor::zeros(t);
  for (auto& x : h.i) x = d(rng);
  return h;
}

// ||got - want|| / ||want|| over all elements (the absolute norm when want is all zero):
// the norm-wise relative error every tolerance in the tests is stated in.
inline double normRelError(const HostTensor& got, const HostTensor& want) {
  double d = 0, n = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    d += std::pow(got.get(k) - want.get(k), 2);
    n += std::pow(want.get(k), 2);
  }
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

// One function under construction plus the values bound to its inputs and params.
struct GraphUnderTest {
  Module m;
  Graph& g = m.add("f");
  Builder b{g};
  Bindings env;

  Value* in(const std::string& name, const HostTensor& t) {
    env[name] = t;
    return b.input(name, t.type);
  }
  Value* par(const std::string& name, const HostTensor& t) {
    env[name] = t;
    return b.param(name, t.type);
  }
};

// Runs `f`, which must throw fusec::Error whose one-line message contains `part`.
inline void expectError(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
  }
}

}  // namespace fusec::test

// Op-coverage registry: each test file that includes this gets its own (anonymous namespace,
// on purpose), so "every op in ops.def has an interpreter test" and "… has an autodiff test"
// are counted separately. Registration runs at static initialisation, so the check does not
// depend on the gtest filter or order.
namespace {
[[maybe_unused]] std::set<fusec::OpKind>& coveredKinds() {
  static std::set<fusec::OpKind> s;
  return s;
}
[[maybe_unused]] bool cover(std::initializer_list<fusec::OpKind> ks) {
  coveredKinds().insert(ks.begin(), ks.end());
  return true;
}
}  // namespace
#define FUSEC_TEST_CAT2(a, b) a##b
#define FUSEC_TEST_CAT(a, b) FUSEC_TEST_CAT2(a, b)
#define COVERS(...) [[maybe_unused]] const bool FUSEC_TEST_CAT(covers_, __LINE__) = cover({__VA_ARGS__})
