#include "random_graph.h"

#include <algorithm>
#include <cmath>

#include "ir/builder.h"

namespace fusec::gen {
namespace {

class Gen {
 public:
  Gen(uint64_t seed, const RandomGraphOptions& o) : rng_(seed), o_(o) {}

  void fill(Graph& g, int depth, const std::vector<Type>& inputTypes) {
    Builder b(g);
    std::vector<Value*> pool;
    int k = 0;
    for (const Type& t : inputTypes) pool.push_back(b.input("in" + std::to_string(k++), t));
    if (inputTypes.empty()) {
      int n = 1 + int(rng_() % 3);
      for (int i = 0; i < n; ++i) pool.push_back(b.input("x" + std::to_string(i), randomType(DType::f32)));
      pool.push_back(b.param("layers.0.w", randomType(DType::f32)));
      pool.push_back(b.input("ids", Type{DType::i64, randomShape()}));
    }
    int target = depth == 0 ? o_.ops : 3 + int(rng_() % 5);
    for (int added = 0, tries = 0; added < target && tries < target * 60; ++tries)
      if (tryOne(b, pool, depth)) ++added;
    int outs = 1 + int(rng_() % 2);
    for (int i = 0; i < outs; ++i) b.output(pool[rng_() % pool.size()]);
  }

 private:
  Shape randomShape() {
    Shape s;
    int rank = int(rng_() % 4);
    for (int i = 0; i < rank; ++i) s.push_back(1 + int64_t(rng_() % 5));
    return s;
  }
  Type randomType(DType d) { return Type{d, randomShape()}; }
  DType randomDType() {
    static const DType all[] = {DType::f32, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean};
    return all[rng_() % 7];
  }
  int64_t smallInt(int lo, int hi) { return lo + int64_t(rng_() % uint64_t(hi - lo + 1)); }
  double randomFloat() {
    if (o_.oddAttributes) switch (rng_() % 10) {
        case 0: return INFINITY;
        case 1: return -INFINITY;
        case 2: return NAN;
        case 3: return 1e-300 * double(rng_() % 7 + 1);
        case 4: return std::ldexp(1.0, -1074);  // smallest subnormal
        default: break;
      }
    return std::uniform_real_distribution<double>(-100, 100)(rng_);
  }
  std::string randomString() {
    static const char* names[] = {"k", "fused.0", "a \"quoted\" name", "back\\slash", "tab\there", "\xc3\xa9t\xc3\xa9", "layers.3.ffn"};
    return o_.oddAttributes ? names[rng_() % 7] : "k" + std::to_string(rng_() % 100);
  }
  Value* pick(const std::vector<Value*>& pool) { return pool[rng_() % pool.size()]; }
  // Prefers a value of type `t`, so binary ops find partners.
  Value* pickLike(const std::vector<Value*>& pool, const Type& t) {
    std::vector<Value*> same;
    for (Value* v : pool)
      if (v->type == t) same.push_back(v);
    if (!same.empty() && rng_() % 4 != 0) return same[rng_() % same.size()];
    return pick(pool);
  }

  AttrValue randomAttr(const AttrSpec& s, const Type& first) {
    switch (s.kind) {
      case AttrKind::Int: return smallInt(-first.rank(), std::max(first.rank(), 1) + 1);
      // step_invariant is the step-invariant pass's record, which the verifier checks against
      // the kernel's operands: a random one would be refused.
      case AttrKind::Bool: return s.name != "step_invariant" && bool(rng_() % 2);
      case AttrKind::Float: return randomFloat();
      case AttrKind::Str:  // a dtype attribute takes a dtype's name (or none), else any text
        if (s.name == "out_dtype") return rng_() % 2 ? std::string() : std::string(dtypeName(randomDType()));
        return randomString();
      case AttrKind::Ints: {
        std::vector<int64_t> xs;
        if (s.name == "perm") {
          for (int i = 0; i < first.rank(); ++i) xs.push_back(i);
          std::shuffle(xs.begin(), xs.end(), rng_);
        } else {
          int n = 1 + int(rng_() % 2);
          for (int i = 0; i < n; ++i) xs.push_back(smallInt(-first.rank(), std::max(first.rank() - 1, 0)));
        }
        return xs;
      }
    }
    return int64_t(0);
  }

  std::vector<Type> declaredFor(const OpInfo& info, const std::vector<Value*>& operands) {
    const Type* x = operands.empty() ? nullptr : &operands[0]->type;
    switch (info.rule) {
      case TypeRule::Declared: case TypeRule::Iota: return {randomType(randomDType())};
      case TypeRule::Cast: return {Type{randomDType(), x->shape}};
      case TypeRule::Reshape: {
        Type t{x->dtype, {}};
        if (rng_() % 2) t.shape = {x->numel()};
        else { t.shape = x->shape; std::reverse(t.shape.begin(), t.shape.end()); t.shape.push_back(1); }
        return {t};
      }
      case TypeRule::Broadcast: {
        Type t = *x;
        for (auto& d : t.shape)
          if (d == 1) d = smallInt(1, 4);
        t.shape.insert(t.shape.begin(), smallInt(1, 3));
        return {t};
      }
      default: return {};
    }
  }

  bool tryOne(Builder& b, std::vector<Value*>& pool, int depth) {
    const auto& ops = allOps();
    const OpInfo& info = ops[rng_() % ops.size()];
    if (info.category == OpCategory::Composite && !o_.allowComposite) return false;
    if (info.kind == OpKind::Kernel && (!o_.allowKernels || depth >= o_.maxKernelDepth)) return false;
    if ((info.kind == OpKind::Input || info.kind == OpKind::Param) && rng_() % 3) return false;
    std::vector<Value*> operands;
    int arity = info.arity >= 0 ? info.arity : 1 + int(rng_() % 3);
    for (int i = 0; i < arity; ++i) operands.push_back(i == 0 ? pick(pool) : pickLike(pool, operands[0]->type));
    // Index operands want integer types.
    if ((info.kind == OpKind::Gather || info.kind == OpKind::ScatterAdd || info.kind == OpKind::Rope ||
         info.kind == OpKind::CrossEntropy) && rng_() % 2) {
      size_t idx = info.kind == OpKind::Gather || info.kind == OpKind::ScatterAdd ? 1 : 1;
      for (Value* v : pool)
        if (isInt(v->type.dtype) && rng_() % 2) { operands[idx] = v; break; }
    }
    // dropout's key is an i64 scalar: one from the pool, else a fresh input.
    if (info.kind == OpKind::Dropout) {
      Value* key = nullptr;
      for (Value* v : pool)
        if (v->type == Type{DType::i64, {}}) key = v;
      if (!key) key = b.create(OpKind::Input, {}, {{"name", "v" + std::to_string(serial_++)}}, {Type{DType::i64, {}}})[0];
      operands[1] = key;
    }
    // attention_backward's six operands must agree as an attention's do: take a generated
    // attention's operands and results (by chance alone it was all but never generated).
    if (info.kind == OpKind::AttentionBackward) {
      std::vector<const Op*> attentions;
      for (Value* v : pool)
        if (v->def && v->def->kind == OpKind::Attention && v->index == 0) attentions.push_back(v->def);
      if (!attentions.empty()) {
        const Op* at = attentions[rng_() % attentions.size()];
        Value* o = at->results[0].get();
        operands = {at->operands[0], at->operands[1], at->operands[2], o, pickLike(pool, o->type), at->results[1].get()};
      }
    }
    Type first = operands.empty() ? Type{} : operands[0]->type;
    NamedAttrs attrs;
    for (const AttrSpec& s : info.attrs)
      // side_stream, a record the schedule pass makes, draws nothing: the graphs of every seed
      // stay those the tests were written against.
      if (s.name != "side_stream" && (!s.defaultValue || rng_() % 2)) {
        if (info.kind == OpKind::Dropout && s.name == "p") {
          attrs.push_back({s.name, double(rng_() % 10) / 10});  // in [0, 1), as its rule wants
        } else if (info.kind == OpKind::Input || info.kind == OpKind::Param) {
          if (s.name == "name") attrs.push_back({s.name, "v" + std::to_string(serial_++)});  // roles stay default
        } else {
          attrs.push_back({s.name, randomAttr(s, first)});
        }
      }
    try {
      std::vector<Value*> results;
      if (info.kind == OpKind::Kernel) {
        auto body = std::make_unique<Graph>();
        std::vector<Type> inTypes;
        for (Value* v : operands) inTypes.push_back(v->type);
        fill(*body, depth + 1, inTypes);
        std::vector<Type> outTypes;
        for (Value* v : body->outputs) outTypes.push_back(v->type);
        results = b.create(info.kind, operands, attrs, outTypes, std::move(body));
      } else {
        results = b.create(info.kind, operands, attrs, declaredFor(info, operands));
      }
      for (Value* r : results) {
        if (rng_() % 5 == 0) r->name = "v" + std::to_string(serial_++) + (rng_() % 2 ? ".x" : "_y");
        pool.push_back(r);
      }
      return true;
    } catch (const Error&) {
      return false;  // a combination the type rules reject: try another
    }
  }

  std::mt19937_64 rng_;
  RandomGraphOptions o_;
  int serial_ = 0;
};

}  // namespace

std::unique_ptr<Module> randomModule(uint64_t seed, const RandomGraphOptions& opts) {
  auto m = std::make_unique<Module>();
  Gen gen(seed, opts);
  int funcs = 1 + int(seed % 2);
  for (int f = 0; f < funcs; ++f) gen.fill(m->add(f == 0 ? "forward" : "train_step"), 0, {});
  return m;
}

}  // namespace fusec::gen
