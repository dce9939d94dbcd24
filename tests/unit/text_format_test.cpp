// The .fir text format: exact round trips, and precise located errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "random_graph.h"
#include "test_util.h"

using namespace fusec;

TEST(TextFormat, RandomGraphsRoundTripExactly) {
  std::map<OpKind, int> seen;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    auto m = gen::randomModule(seed);
    ASSERT_NO_THROW(verify(*m)) << "seed " << seed;
    std::string first = printModule(*m);
    std::unique_ptr<Module> again;
    ASSERT_NO_THROW(again = parseModule(first, "random.fir")) << "seed " << seed << "\n" << first;
    std::string second = printModule(*again);
    ASSERT_EQ(first, second) << "seed " << seed;
    auto count = [&](const Graph& g, auto& self) -> void {
      for (auto& op : g.ops) {
        seen[op->kind]++;
        if (op->body) self(*op->body, self);
      }
    };
    for (auto& f : m->funcs) count(*f, count);
  }
  // The generator must reach every op of the table, or the round trip proves little.
  for (const OpInfo& info : allOps()) EXPECT_GT(seen[info.kind], 0) << "never generated: " << info.name;
}

TEST(TextFormat, PrintsCanonicalForm) {
  const char* text = R"(func @main {
  %x = input() {name = "x"} : f32[4,8]
  %c = constant() {value = 0.5} : f32[4,8]
  %0 = mul(%x, %c) : f32[4,8]
  %1 = sum(%0) {axes = [1], keepdim = true} : f32[4,1]
  %k, %2 = kernel(%x) {name = "k0"} : f32[4,8], f32[4,8] {
    %a = input() {name = "a"} : f32[4,8]
    %k0 = exp(%a) : f32[4,8]
    return %k0, %a
  }
  %3 = matmul(%x, %k) {transpose_b = true} : f32[4,4]
  return %1, %3
}
)";
  auto m = parseModule(text, "t.fir");
  EXPECT_EQ(printModule(*m), text);
}

// A kernel body numbers its unnamed values %k0, %k1, ... so that they never read as the
// enclosing function's %0, %1, ...; kN in a body parses back as unnamed (the round trip is
// stable), while %k0 in a function is an ordinary name.
TEST(TextFormat, KernelBodiesNumberTheirOwnValues) {
  auto m = parseModule(R"(func @f {
  %k0 = input() {name = "x"} : f32[4]
  %0 = neg(%k0) : f32[4]
  %1 = kernel(%0) {name = "k"} : f32[4] {
    %a = input() {name = "a"} : f32[4]
    %7 = exp(%a) : f32[4]
    %k9 = neg(%7) : f32[4]
    %k = add(%7, %k9) : f32[4]
    return %k
  }
  return %1
}
)",
                       "t.fir");
  const std::string want = R"(func @f {
  %k0 = input() {name = "x"} : f32[4]
  %0 = neg(%k0) : f32[4]
  %1 = kernel(%0) {name = "k"} : f32[4] {
    %a = input() {name = "a"} : f32[4]
    %k0 = exp(%a) : f32[4]
    %k1 = neg(%k0) : f32[4]
    %k = add(%k0, %k1) : f32[4]
    return %k
  }
  return %1
}
)";
  EXPECT_EQ(printModule(*m), want);
  EXPECT_EQ(printModule(*parseModule(want, "t.fir")), want);
  // A body value named kN by a builder keeps its name; the numbering goes around it.
  Graph& body = *m->funcs[0]->ops[2]->body;
  body.ops[1]->result()->name = "k1";
  EXPECT_NE(printModule(*m).find("%k1 = exp(%a)"), std::string::npos);
  EXPECT_NE(printModule(*m).find("%k0 = neg(%k1)"), std::string::npos);
}

TEST(TextFormat, RenumbersNumericNamesAndOmitsDefaults) {
  auto m = parseModule(R"(
// comments are ignored
func @f {
  %7 = input() {name = "x"} : f32[3]
  %3 = neg(%7) : f32[3]
  %9 = sum(%3) {axes = [0], keepdim = false} : f32[]
  return %9
})");
  EXPECT_EQ(printModule(*m),
            "func @f {\n  %0 = input() {name = \"x\"} : f32[3]\n  %1 = neg(%0) : f32[3]\n"
            "  %2 = sum(%1) {axes = [0]} : f32[]\n  return %2\n}\n");
}

TEST(TextFormat, FloatsRoundTripBitExactly) {
  for (double v : {0.1, 1e-5, -3.0, 1e300, 5e-324, 2.5e-8, 1.0 / 3.0}) {
    std::string s = formatFloat(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
  EXPECT_EQ(formatFloat(-INFINITY), "-inf");
  EXPECT_EQ(formatFloat(NAN), "nan");
}

TEST(TextFormat, MultipleFunctions) {
  auto m = parseModule("func @a {\n  %x = input() {name = \"x\"} : f32[]\n  return %x\n}\n\n"
                       "func @b {\n  %x = input() {name = \"x\"} : i64[2]\n  return %x\n}\n");
  ASSERT_EQ(m->funcs.size(), 2u);
  EXPECT_EQ(m->funcs[1]->name, "b");
}

// In-place updates (`-> "param"`) and arena offsets (`@N`) round-trip and are verified.
TEST(TextFormat, UpdatesAndOffsetsRoundTrip) {
  const std::string text =
      "func @step {\n"
      "  %w = param() {name = \"w\"} : f32[4]\n"
      "  %g = input() {name = \"g\"} : f32[4]\n"
      "  %n = sub(%w, %g) : f32[4] @256\n"
      "  %s = sum(%n) {axes = [0]} : f32[] @0\n"
      "  return %s, %n -> \"w\"\n"
      "}\n";
  auto m = parseModule(text, "u.fir");
  const Graph& g = *m->funcs[0];
  EXPECT_EQ(g.updateOf(0), "");
  EXPECT_EQ(g.updateOf(1), "w");
  EXPECT_EQ(g.ops[2]->result()->offset, 256);
  EXPECT_EQ(printModule(*m), text);
  verify(*m);
  auto bad = [](const std::string& ret) {
    return test::errorOf([&] {
      verify(*parseModule("func @f {\n  %w = param() {name = \"w\"} : f32[4]\n  %x = input() {name = \"x\"} : f32[2]\n"
                          "  return " + ret + "\n}\n",
                          "u.fir"));
    });
  };
  EXPECT_EQ(bad("%x -> \"w\""), "u.fir:1:1: error: @f: returned value 0 has type f32[2] but updates param \"w\" of type f32[4]");
  EXPECT_EQ(bad("%x -> \"q\""), "u.fir:1:1: error: @f: returned value 0 updates \"q\", which is not a param");
  EXPECT_EQ(bad("%w -> \"w\", %w -> \"w\""), "u.fir:1:1: error: @f: param \"w\" is updated twice");
  EXPECT_EQ(bad("%w -> 3"), "u.fir:4:16: error: expected a param name string after '->' but found '3'");
}

// Each malformed input must give exactly this located message.
TEST(TextFormat, ErrorsCarryFileLineColumn) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"func @f {\n  %x = frob() : f32[]\n  return %x\n}", "e.fir:2:8: error: unknown op 'frob'"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = add(%x) : f32[2]\n  return %y\n}",
       "e.fir:3:8: error: add takes 2 operands, got 1"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = input() {name = \"y\"} : f32[3]\n"
       "  %z = add(%x, %y) : f32[2]\n  return %z\n}",
       "e.fir:4:8: error: add operands must have the same type, got f32[2], f32[3]"},
      {"func @f {\n  %y = neg(%x) : f32[2]\n  return %y\n}", "e.fir:2:12: error: use of undefined value %x"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %x = neg(%x) : f32[2]\n  return %x\n}",
       "e.fir:3:3: error: redefinition of value %x"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = sum(%x) {axes = 1} : f32[]\n  return %y\n}",
       "e.fir:3:24: error: expected '[' but found '1'"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = neg(%x) : f32[3]\n  return %y\n}",
       "e.fir:3:8: error: result type f32[3] does not match the inferred f32[2]"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n", "e.fir:3:1: error: expected 'return' before the end of file"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  \x01\x02", "e.fir:3:3: error: unexpected byte 0x01"},
      {"func @f {\n  %x = input() {name = \"x\"} : f99[2]\n  return %x\n}",
       "e.fir:2:31: error: unknown dtype 'f99' (expected f32, bf16, f16, i64, i32 or bool)"},
      {"func @f {\n  %x = input() : f32[2]\n  return %x\n}", "e.fir:2:8: error: input requires attribute 'name'"},
      {"func @f {\n  %x = input() {name = \"x\", size = 3} : f32[2]\n  return %x\n}",
       "e.fir:2:29: error: input has no attribute 'size'"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = permute(%x) {perm = [1]} : f32[2]\n  return %y\n}",
       "e.fir:3:8: error: permute perm is not a permutation of 0..0"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  return %x\n}\nfunc @f {\n  %x = input() {name = \"x\"} : f32[2]\n  return %x\n}",
       "e.fir:5:6: error: duplicate function @f"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2,3]\n  %y = reshape(%x) : f32[5]\n  return %y\n}",
       "e.fir:3:8: error: reshape changes the element count: f32[2,3] (6) to f32[5] (5)"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[99999999,99999999,99999]\n  return %x\n}",
       "e.fir:2:34: error: shape has too many elements"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = input() {name = \"x\"} : f32[2]\n  return %y\n}",
       "e.fir:3:8: error: duplicate input name \"x\""},
      {"func @f {\n  %a, %b = neg(%x) : f32[2]\n", "e.fir:2:16: error: use of undefined value %x"},
      {"func @f {\n  %x = input() {name = \"x\"} : f32[2]\n  %y = matmul(%x, %x) : f32[2]\n  return %y\n}",
       "e.fir:3:8: error: matmul operands need rank >= 2, got f32[2] and f32[2]"},
      {"func @f {\n  %x = input() {name = \"x\" : f32[2]\n  return %x\n}",
       "e.fir:2:28: error: expected ',' or '}' in attributes but found ':'"},
      {"func @f {\n  %x = input() {name = \"x} : f32[2]\n  return %x\n}", "e.fir:2:24: error: unterminated string"},
      {"func @f {\n  %x = constant() {value = 1.5} : i64[2]\n  return %x\n}",
       "e.fir:2:8: error: constant 1.5 is not representable in i64"},
  };
  std::set<std::string> distinct;
  for (const Case& c : cases) {
    try {
      parseModule(c.text, "e.fir");
      ADD_FAILURE() << "no error for:\n" << c.text;
    } catch (const Error& e) {
      EXPECT_TRUE(e.located);
      EXPECT_EQ(std::string(e.what()), c.error) << c.text;
      distinct.insert(e.what());
    }
  }
  EXPECT_GE(distinct.size(), 15u);
}

TEST(TextFormat, GarbageNeverCrashes) {
  // Mutations of a valid file: truncations and byte flips must throw Error, never crash.
  auto m = gen::randomModule(42);
  std::string text = printModule(*m);
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t = text;
    if (i % 3 == 0) t.resize(rng() % t.size());
    else for (int k = 0; k < 1 + i % 4; ++k) t[rng() % t.size()] = char(rng() % 256);
    try {
      auto parsed = parseModule(t, "fuzz.fir");
      EXPECT_EQ(printModule(*parsed), printModule(*parseModule(printModule(*parsed))));
    } catch (const Error& e) {
      EXPECT_TRUE(e.located || std::string(e.what()).size() > 0);
    }
  }
}

// Every checked-in .fir file that parses (the examples and the pass tests) prints, re-parses
// and prints again identically.
TEST(TextFormat, EveryFirFileRoundTrips) {
  int n = 0;
  for (const char* dir : {"/examples", "/tests/lit/passes"}) {
    for (auto& e : std::filesystem::recursive_directory_iterator(std::string(FUSEC_SOURCE_DIR) + dir)) {
      if (e.path().extension() != ".fir") continue;
      std::unique_ptr<Module> m;
      try {
        m = parseFile(e.path().string());
      } catch (const Error&) {
        continue;  // a pass test may hold deliberately invalid input checked elsewhere
      }
      std::string first = printModule(*m);
      EXPECT_EQ(printModule(*parseModule(first, e.path().string())), first) << e.path();
      ++n;
    }
  }
  EXPECT_GE(n, 2);
}
