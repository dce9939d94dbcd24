#include "passes/adamw_update.h"

#include <cmath>

namespace fusec {

namespace {

// `v` of `like`'s type (a splat constant).
Value* splat(Builder& b, const Value* like, double v) { return b.constant(v, like->type); }

// a (k) c with an f32[] operand broadcast to the other's shape (a's first, as the frontend's
// operators do, so that both build the same IR).
Value* binary(Builder& b, OpKind k, Value* a, Value* c) {
  if (a->type.shape != c->type.shape) {
    if (a->type.rank() == 0) a = b.broadcast(a, c->type.shape);
    else c = b.broadcast(c, a->type.shape);
  }
  return b.binary(k, a, c);
}

}  // namespace

AdamWUpdate::AdamWUpdate(Builder& b, const AdamWConfig& cfg, Value* step, Value* loss) : b_(b), cfg_(cfg) {
  if (step->type != Type{DType::f32, {}}) throw Error("AdamW step must be f32[], got " + step->type.str());
  if (loss && loss->type != Type{DType::f32, {}}) throw Error("AdamW loss must be f32[], got " + loss->type.str());
  if (!(cfg.lr >= 0) || !(cfg.eps >= 0) || !(cfg.weightDecay >= 0))
    throw Error("AdamW lr, eps and weight decay must be non-negative");
  if (!(cfg.beta1 >= 0 && cfg.beta1 < 1) || !(cfg.beta2 >= 0 && cfg.beta2 < 1))
    throw Error("AdamW betas must lie in [0, 1)");
  // The bias corrections 1 - beta^t without f32 cancellation (torch computes them in double;
  // 1 - pow(0.999f, 1) in f32 is off by 1e-5 relative): 1 - beta^t = -expm1(t ln beta), and
  // expm1(x) = 2 tanh(x/2) / (1 - tanh(x/2)) keeps full relative precision for small |x|.
  // beta = 0 gives ln beta = -inf, tanh = -1 and a correction of 1, as 0^t = 0 wants.
  auto biasCorrection = [&](double beta) {
    Value* th = b.unary(OpKind::Tanh, binary(b, OpKind::Mul, step, splat(b, step, 0.5 * std::log(beta))));
    Value* denom = binary(b, OpKind::Sub, splat(b, th, 1.0), th);
    Value* num = binary(b, OpKind::Mul, splat(b, th, -2.0), th);
    return binary(b, OpKind::Div, num, denom);
  };
  Value* bc1 = biasCorrection(cfg.beta1);
  Value* bc2 = biasCorrection(cfg.beta2);
  stepSize_ = binary(b, OpKind::Div, splat(b, bc1, cfg.lr), bc1);
  stepSize_->name = "adamw.step_size";
  bc2Sqrt_ = b.unary(OpKind::Sqrt, bc2);
  bc2Sqrt_->name = "adamw.bc2_sqrt";
  if (loss) {
    // x - x is 0 for every finite x and NaN for NaN and +-Inf: one compare, no isfinite op.
    finite_ = b.binary(OpKind::Eq, b.binary(OpKind::Sub, loss, loss), splat(b, loss, 0.0));
    finite_->name = "adamw.finite";
  }
}

AdamWUpdate::Update AdamWUpdate::update(Value* p, Value* g, Value* m, Value* v) const {
  if (g->type != p->type || m->type != p->type || v->type != p->type)
    throw Error("AdamW update needs param, grad and state of one type, got " + p->type.str() + ", " + g->type.str() +
                ", " + m->type.str() + ", " + v->type.str());
  const AdamWConfig& c = cfg_;
  Builder& b = b_;
  Value* decayed = c.weightDecay != 0 ? binary(b, OpKind::Mul, p, splat(b, p, 1.0 - c.lr * c.weightDecay)) : p;
  Value* gm = binary(b, OpKind::Mul, g, splat(b, g, 1.0 - c.beta1));
  Value* m1 = binary(b, OpKind::Add, binary(b, OpKind::Mul, m, splat(b, m, c.beta1)), gm);
  // One op per statement where two would be built: the IR's op order is part of its text.
  Value* gg = binary(b, OpKind::Mul, g, g);
  Value* g2 = binary(b, OpKind::Mul, gg, splat(b, g, 1.0 - c.beta2));
  Value* v1 = binary(b, OpKind::Add, binary(b, OpKind::Mul, v, splat(b, v, c.beta2)), g2);
  Value* scaled = binary(b, OpKind::Div, b.unary(OpKind::Sqrt, v1), bc2Sqrt_);
  Value* denom = binary(b, OpKind::Add, scaled, splat(b, scaled, c.eps));
  Value* ratio = binary(b, OpKind::Div, m1, denom);
  Value* p1 = binary(b, OpKind::Sub, decayed, binary(b, OpKind::Mul, stepSize_, ratio));
  if (!finite_) return {p1, m1, v1};
  Value* keep = b.broadcast(finite_, p->type.shape);
  return {b.select(keep, p1, p), b.select(keep, m1, m), b.select(keep, v1, v)};
}

}  // namespace fusec
