// Helpers shared by the unit tests.
#pragma once
#include <functional>
#include <initializer_list>
#include <set>
#include <string>

#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace fusec::test {

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
