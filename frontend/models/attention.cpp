#include "frontend/models/attention.h"

#include <cmath>

#include "api/compile.h"
#include "frontend/tensor.h"
#include "ir/roles.h"

namespace fusec::models {

using fe::Tensor;

namespace {

struct Qkv {
  Tensor q, k, v;
};

Qkv declareQkv(Builder& b, int64_t batch, int64_t seq, int64_t d, DType inputs) {
  if (batch <= 0 || seq <= 0 || d <= 0)
    throw Error("attention sizes must be positive, got batch " + std::to_string(batch) + ", seq " + std::to_string(seq) +
                ", d " + std::to_string(d));
  if (inputs != DType::f32 && inputs != DType::bf16)
    throw Error("attention inputs must be f32 or bf16, got " + std::string(dtypeName(inputs)));
  const Type t{inputs, {batch, seq, d}};
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

Graph& buildAttentionProgram(Module& m, const std::string& program, int64_t batch, int64_t seq, int64_t d, DType inputs) {
  if (program == "attention") return buildAttention(m, batch, seq, d, inputs);
  if (program == "attention_backward") return buildAttentionBackward(m, batch, seq, d, inputs);
  throw Error("unknown attention program '" + program + "' (known: attention, attention_backward)");
}

Graph& buildAttention(Module& m, int64_t batch, int64_t seq, int64_t d, DType inputs) {
  Graph& g = m.add("attention");
  Builder b(g);
  Qkv x = declareQkv(b, batch, seq, d, inputs);
  b.output(causalAttention(x).named("out").value());
  return g;
}

// The forward with grad_out, the adjoint of its output: autodiff turns it into the VJP
// (passes/train_passes.h), dq, dk, dv.
Graph& buildAttentionBackward(Module& m, int64_t batch, int64_t seq, int64_t d, DType inputs) {
  Graph& g = m.add("attention_backward");
  Builder b(g);
  Qkv x = declareQkv(b, batch, seq, d, inputs);
  fe::input(b, "grad_out", x.q.type(), Role::Cotangent).named("grad_out");
  b.output(causalAttention(x).named("out").value());
  return g;
}

std::unique_ptr<Module> compileAttentionProgram(const std::string& program, int64_t batch, int64_t seq, int64_t d,
                                                AttentionLowering lowering, DType dtype, DType inputs) {
  auto m = std::make_unique<Module>();
  buildAttentionProgram(*m, program, batch, seq, d, inputs);
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
