// Shared by the GEMM plan tests (CPU) and the cuBLASLt tests (GPU): the matmuls of a compiled
// program, each cut out with the view chains of its operands into a standalone graph whose
// inputs are the operands' storage (their bases), and a reference loop that evaluates a
// GemmPlan over that storage exactly as the interpreter evaluates the matmul.
#pragma once
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "frontend/models/transformer.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/strided_view.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "runtime/gemm_plan.h"
#include "test_util.h"

namespace fusec::test {

// `model`'s train_step as `fusec compile` builds it: program passes, then the whole default
// pipeline (through memory-plan). Layers and sequence kept small for CPU reference loops.
// With ranks > 1, one rank's program of a data-parallel job (its bf16 weight-gradient GEMMs
// write f32 for the collectives: matmul out_dtype).
inline std::unique_ptr<Module> compiledTrainStep(const std::string& model, DType dtype, int64_t layers,
                                                 int64_t batch, int64_t seq, int64_t ranks = 1) {
  auto cfg = models::namedConfig(model);
  cfg.layers = layers;
  auto m = std::make_unique<Module>();
  models::buildTrainLoss(*m, cfg, batch, seq);
  api::CompileOptions o{.dtype = dtype};
  o.dataParallel.ranks = ranks;
  api::lowerProgram(*m, "train_step", o);
  verify(*m);
  return m;
}

// One matmul of a program, standalone: inputs are its operands' distinct bases (in order),
// then the operands' view chains and the matmul, whose result is the one output.
struct GemmCase {
  const Op* mm = nullptr;  // in the program
  rt::GemmPlan plan;
  Module sub;
  std::vector<const Value*> bases;  // the program's values bound to sub's inputs, in order
};

inline Value* cloneViewChain(Graph& g, const Value* v, std::map<const Value*, Value*>& map) {
  if (auto it = map.find(v); it != map.end()) return it->second;
  const Op& d = *v->def;  // a view op: resolveView stopped at the bases, which are mapped
  Value* x = cloneViewChain(g, d.operands.at(0), map);
  auto op = makeOp(d.kind);
  op->attrs = d.attrs;
  op->operands = {x};
  auto r = std::make_unique<Value>();
  r->type = v->type;
  op->results.push_back(std::move(r));
  return map[v] = g.append(std::move(op))->result();
}

inline std::unique_ptr<GemmCase> gemmCase(const Op& mm) {
  auto c = std::make_unique<GemmCase>();
  c->mm = &mm;
  c->plan = rt::planGemm(mm);
  Graph& g = c->sub.add("gemm");
  Builder b(g);
  std::map<const Value*, Value*> map;
  for (const Value* operand : mm.operands) {
    const Value* base = resolveView(operand)->base;
    if (map.count(base)) continue;
    c->bases.push_back(base);
    map[base] = b.input("base" + std::to_string(c->bases.size() - 1), base->type);
  }
  Value* x = cloneViewChain(g, mm.operands[0], map);
  Value* y = cloneViewChain(g, mm.operands[1], map);
  auto op = makeOp(OpKind::Matmul);
  op->attrs = mm.attrs;
  op->operands = {x, y};
  auto r = std::make_unique<Value>();
  r->type = mm.result()->type;
  op->results.push_back(std::move(r));
  g.addOutput(g.append(std::move(op))->result());
  verify(c->sub);
  return c;
}

// The top-level matmuls of `g`, one per distinct plan shape and launch count (`all`: every one).
inline std::vector<std::unique_ptr<GemmCase>> gemmCases(const Graph& g, bool all) {
  std::vector<std::unique_ptr<GemmCase>> out;
  std::set<std::pair<rt::GemmShapeKey, size_t>> seen;
  for (const auto& op : g.ops) {
    if (op->kind != OpKind::Matmul) continue;
    auto c = gemmCase(*op);
    if (all || seen.insert({rt::shapeKey(c->plan), c->plan.launches.size()}).second) out.push_back(std::move(c));
  }
  return out;
}

// Uniform in +-[0.1, 1), rounded to the dtype: never zero, so a dropped term shows.
// Random storage for a case's bases, as interpreter bindings.
inline Bindings randomBases(const GemmCase& c, std::mt19937& rng) {
  Bindings env;
  for (size_t i = 0; i < c.bases.size(); ++i) env["base" + std::to_string(i)] = randomNonZero(c.bases[i]->type, rng, 0.5);
  return env;
}

// A double rounded once to `d` (as the interpreter rounds matmul results): via float with
// round-to-odd, which is exact for the narrower bf16.
inline float roundOnce(double x, DType d) {
  float f = float(x);
  if (d == DType::f32 || double(f) == x || !std::isfinite(f)) return roundToDType(f, d);
  if (std::fabs(double(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1;
  std::memcpy(&f, &bits, 4);
  return roundToDType(f, d);
}

// C = A B by the plan over the bases' storage: the same double accumulation in k order as
// the interpreter, so an f32 or bf16 result must match it bit for bit.
inline HostTensor evalPlan(const GemmCase& c, const Bindings& env) {
  const rt::GemmPlan& p = c.plan;
  auto storage = [&](const Value* base) -> const std::vector<float>& {
    for (size_t i = 0; i < c.bases.size(); ++i)
      if (c.bases[i] == base) return env.at("base" + std::to_string(i)).f;
    throw Error("internal: a plan base is not an operand's base");
  };
  const auto& A = storage(p.a.base);
  const auto& B = storage(p.b.base);
  HostTensor C = HostTensor::zeros(c.mm->result()->type);
  auto at = [](const rt::GemmMatrix& m, int64_t i, int64_t j) { return m.colMajor ? i + j * m.ld : i * m.ld + j; };
  for (const auto& l : p.launches)
    for (int64_t s = 0; s < p.batch; ++s)
      for (int64_t i = 0; i < p.M; ++i)
        for (int64_t j = 0; j < p.N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < p.K; ++k)
            acc += double(A.at(size_t(l[0] + s * p.a.batchStride + at(p.a, i, k)))) *
                   double(B.at(size_t(l[1] + s * p.b.batchStride + at(p.b, k, j))));
          C.f.at(size_t(l[2] + s * p.c.batchStride + at(p.c, i, j))) = roundOnce(acc, p.cDType());
        }
  return C;
}

}  // namespace fusec::test
