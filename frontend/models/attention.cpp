#include "frontend/models/attention.h"

#include <cmath>

#include "frontend/tensor.h"
#include "frontend/optim.h"
#include "passes/autodiff.h"
#include "passes/decompose.h"
#include "api/compile.h"

namespace fusec::models {

using fe::Tensor;

namespace {

struct Qkv {
  Tensor q, k, v;
};

Qkv declareQkv(Builder& b, int64_t batch, int64_t seq, int64_t d) {
  if (batch <= 0 || seq <= 0 || d <= 0)
    throw Error("attention sizes must be positive, got batch " + std::to_string(batch) + ", seq " + std::to_string(seq) +
                ", d " + std::to_string(d));
  const Type t{DType::f32, {batch, seq, d}};
  return {fe::input(b, "q", t).named("q"), fe::input(b, "k", t).named("k"), fe::input(b, "v", t).named("v")};
}

Tensor causalAttention(const Qkv& x) {
  return fe::attention(x.q, x.k, x.v, /*causal=*/true, 1.0 / std::sqrt(double(x.q.size(-1))));
}

}  // namespace

const std::vector<std::string>& attentionProgramNames() {
  static const std::vector<std::string> names = {"attention", "attention_backward"};
  return names;
}

bool isAttentionProgram(const std::string& program) {
  for (const std::string& n : attentionProgramNames())
    if (n == program) return true;
  return false;
}

Graph& buildAttentionProgram(Module& m, const std::string& program, int64_t batch, int64_t seq, int64_t d,
                             AttentionLowering lowering) {
  if (program == "attention") return buildAttention(m, batch, seq, d);
  if (program == "attention_backward") return buildAttentionBackward(m, batch, seq, d, lowering);
  throw Error("unknown attention program '" + program + "' (known: attention, attention_backward)");
}

Graph& buildAttention(Module& m, int64_t batch, int64_t seq, int64_t d) {
  Graph& g = m.add("attention");
  Builder b(g);
  Qkv x = declareQkv(b, batch, seq, d);
  b.output(causalAttention(x).named("out").value());
  return g;
}

// The gradient is traced here, w.r.t. the inputs q, k, v, rather than by the autodiff pass,
// which differentiates a scalar loss w.r.t. params (a training step's weights). The loss
// sum(out * grad_out) has d loss / d out = grad_out, so its gradient is the VJP at grad_out.
// Naive, the attention is decomposed first, so the gradient recomputes S and P = softmax(S)
// from q and k; fused, it is one attention_backward composite (see the header).
Graph& buildAttentionBackward(Module& m, int64_t batch, int64_t seq, int64_t d, AttentionLowering lowering) {
  Graph& g = m.add("attention_backward");
  Builder b(g);
  Qkv x = declareQkv(b, batch, seq, d);
  Tensor gradOut = fe::input(b, "grad_out", x.q.type()).named("grad_out");
  Tensor prod = causalAttention(x) * gradOut;
  if (resolveAttentionLowering("attention_backward", lowering, false) == AttentionLowering::Naive) decomposeAttention(g);
  Tensor loss = prod.sum({0, 1, 2});
  std::vector<Value*> grads = appendGradients(g, loss.value(), {x.q.value(), x.k.value(), x.v.value()});
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i]->name = names[i];
    g.addOutput(grads[i]);
  }
  return g;
}

std::unique_ptr<Module> compileAttentionProgram(const std::string& program, int64_t batch, int64_t seq, int64_t d,
                                                AttentionLowering lowering, DType dtype) {
  auto m = std::make_unique<Module>();
  buildAttentionProgram(*m, program, batch, seq, d, lowering);
  api::CompileOptions o;  // verifies after every pass by default
  o.dtype = dtype;
  o.attention = lowering;
  api::lowerProgram(*m, program, o);
  return m;
}

int64_t savedForBackwardBytes(int64_t batch, int64_t seq, int64_t elementBytes) {
  return batch * seq * seq * elementBytes;
}

}  // namespace fusec::models
