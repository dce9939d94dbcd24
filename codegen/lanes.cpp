#include "codegen/lanes.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "ir/type_rules.h"

namespace fusec::codegen {

namespace {

int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t floorMod(int64_t a, int64_t b) { return a - floorDiv(a, b) * b; }

LaneMap unknownMap(size_t rank, int V, bool broken) {
  LaneMap m;
  m.off.assign(rank, std::vector<int64_t>(size_t(V), 0));
  m.g.assign(rank, 1);
  m.r.assign(rank, 0);
  m.active.assign(size_t(V), true);
  m.broken = broken;
  return m;
}

LaneMap brokenLike(size_t rank, int V) { return unknownMap(rank, V, true); }

// The row-major position of lane 0 as (G, rho): exactly rho when G == 0, else congruent to
// rho mod G (G divides every non-exact term's stride * g); and each lane's offset from it.
struct Position {
  int64_t G = 0, rho = 0;
  std::vector<int64_t> delta;
};

Position positionOf(const Shape& s, const LaneMap& m, int V) {
  Position p;
  p.delta.assign(size_t(V), 0);
  int64_t stride = 1;
  for (int d = int(s.size()) - 1; d >= 0; --d) {
    const size_t u = size_t(d);
    if (s[u] != 1) {
      if (m.g[u] != 0) p.G = std::gcd(p.G, stride * m.g[u]);
      p.rho += stride * m.r[u];
      for (int j = 0; j < V; ++j) p.delta[size_t(j)] += stride * m.off[u][size_t(j)];
    }
    stride *= s[u];
  }
  if (p.G != 0) p.rho = floorMod(p.rho, p.G);
  return p;
}

// The map of shape `s` read at position `p`: lane 0's coordinates from the position's
// residue, and each lane's coordinates as lane 0's plus a carry that must not depend on the
// unknown part of lane 0's position.
LaneMap fromPosition(const Shape& s, const Position& p, const std::vector<bool>& active, int V) {
  LaneMap m = unknownMap(s.size(), V, false);
  m.active = active;
  int64_t G = p.G, rho = p.rho;
  std::vector<int64_t> carry = p.delta;
  for (int d = int(s.size()) - 1; d >= 0; --d) {
    const size_t u = size_t(d);
    const int64_t E = s[u];
    // Lane 0's coordinate: exact when the position is known modulo a multiple of E.
    if (G == 0 || G % E == 0) {
      m.g[u] = 0;
      m.r[u] = floorMod(rho, E);
      rho = floorDiv(rho - m.r[u], E);
      if (G != 0) G /= E;
      for (int j = 0; j < V; ++j) {
        if (!active[size_t(j)]) continue;
        const int64_t c = m.r[u] + carry[size_t(j)];
        m.off[u][size_t(j)] = floorMod(c, E) - m.r[u];
        carry[size_t(j)] = floorDiv(c, E);
      }
      continue;
    }
    // Known modulo g (a divisor of E): the lanes must stay inside that residue block.
    const int64_t g = std::gcd(G, E);
    m.g[u] = g;
    m.r[u] = floorMod(rho, g);
    for (int j = 0; j < V; ++j) {
      if (!active[size_t(j)]) continue;
      const int64_t c = carry[size_t(j)];
      if (c < 0 || m.r[u] + c >= g) return brokenLike(s.size(), V);
      m.off[u][size_t(j)] = c;
      carry[size_t(j)] = 0;
    }
    G = 1;
    rho = 0;
  }
  for (int j = 0; j < V; ++j)
    if (active[size_t(j)] && carry[size_t(j)] != 0) return brokenLike(s.size(), V);
  return m;
}

}  // namespace

LaneMap outputLanes(const Shape& shape, int V) {
  if (shape.empty() || shape.back() % V != 0) return brokenLike(shape.size(), V);
  LaneMap m = unknownMap(shape.size(), V, false);
  for (int j = 0; j < V; ++j) m.off.back()[size_t(j)] = j;
  m.g.back() = V;
  return m;
}

LaneMap operandLanes(const Op& op, size_t k, const LaneMap& m, int V) {
  const Shape& in = op.operands.at(k)->type.shape;
  const Shape& out = op.result()->type.shape;
  if (m.broken) return brokenLike(in.size(), V);
  if (op.info().category == OpCategory::Pointwise) return m;  // same shape, same index
  switch (op.kind) {
    case OpKind::Reshape: return fromPosition(in, positionOf(out, m, V), m.active, V);
    case OpKind::Permute: {
      const auto& perm = op.attrInts("perm");
      LaneMap o = unknownMap(in.size(), V, false);
      o.active = m.active;
      for (size_t i = 0; i < perm.size(); ++i) {
        const size_t p = size_t(perm[i]);
        o.off[p] = m.off[i];
        o.g[p] = m.g[i];
        o.r[p] = m.r[i];
      }
      return o;
    }
    case OpKind::Broadcast: {
      LaneMap o = unknownMap(in.size(), V, false);
      o.active = m.active;
      const size_t lead = out.size() - in.size();
      for (size_t d = 0; d < in.size(); ++d) {
        if (in[d] == 1) {  // coordinate 0 for every lane
          o.g[d] = 0;
          o.r[d] = 0;
          continue;
        }
        o.off[d] = m.off[d + lead];
        o.g[d] = m.g[d + lead];
        o.r[d] = m.r[d + lead];
      }
      return o;
    }
    case OpKind::Slice: {
      LaneMap o = m;
      const size_t ax = size_t(normalizeAxis(op.attrInt("axis"), int(in.size()), "slice"));
      const int64_t start = op.attrInt("start");
      // One element taken: index 0 only, whatever the step (which may be huge).
      const int64_t step = op.result()->type.shape[ax] == 1 ? 1 : op.attrInt("step");
      for (auto& x : o.off[ax]) x *= step;
      if (o.g[ax] != 0) o.g[ax] *= step;
      o.r[ax] = o.r[ax] * step + start;
      if (o.g[ax] != 0) o.r[ax] = floorMod(o.r[ax], o.g[ax]);
      return o;
    }
    case OpKind::Concat: {
      const size_t ax = size_t(normalizeAxis(op.attrInt("axis"), int(out.size()), "concat"));
      int64_t start = 0;
      for (size_t i = 0; i < k; ++i) start += op.operands[i]->type.shape[ax];
      const int64_t end = start + in[ax];
      LaneMap o = m;
      if (m.g[ax] == 0) {
        // Lane 0's coordinate is known: each lane reads the operand its coordinate falls in.
        for (int j = 0; j < V; ++j) {
          const int64_t c = m.r[ax] + m.off[ax][size_t(j)];
          o.active[size_t(j)] = m.active[size_t(j)] && c >= start && c < end;
        }
        o.r[ax] = m.r[ax] - start;
        return o;
      }
      // Otherwise every lane must read one operand: lanes inside a residue block that no
      // operand boundary cuts.
      const int64_t g = m.g[ax];
      for (const Value* v : op.operands)
        if (v->type.shape[ax] % g != 0) return brokenLike(in.size(), V);
      for (int j = 0; j < V; ++j)
        if (m.active[size_t(j)] && (m.off[ax][size_t(j)] < 0 || m.r[ax] + m.off[ax][size_t(j)] >= g))
          return brokenLike(in.size(), V);
      o.r[ax] = floorMod(m.r[ax] - start, g);
      return o;
    }
    case OpKind::Gather: {
      if (k == 1) return m;  // the index is read where the result is
      // The data is read at the index's value along the axis: unknown, and lanes that
      // differ there read unrelated rows.
      const size_t ax = size_t(normalizeAxis(op.attrInt("axis"), int(out.size()), "gather"));
      LaneMap o = m;
      for (int j = 0; j < V; ++j)
        if (m.active[size_t(j)] && m.off[ax][size_t(j)] != 0) return brokenLike(in.size(), V);
      o.g[ax] = 1;
      o.r[ax] = 0;
      return o;
    }
    default: return brokenLike(in.size(), V);
  }
}

std::optional<VectorRead> vectorRead(const Shape& input, const LaneMap& m, int V) {
  if (m.broken) return std::nullopt;
  int64_t numel = 1;
  for (int64_t d : input) numel *= d;
  if (numel % V != 0) return std::nullopt;
  const Position p = positionOf(input, m, V);
  if (p.G % V != 0) return std::nullopt;  // lane 0's position is not known modulo V
  VectorRead v;
  v.voff.assign(size_t(V), 0);
  v.firstActive = -1;
  int64_t lo = 0, hi = 0;
  for (int j = 0; j < V; ++j) {
    if (!m.active[size_t(j)]) continue;
    const int64_t at = p.rho + p.delta[size_t(j)];
    if (v.firstActive < 0) lo = hi = at, v.firstActive = j;
    lo = std::min(lo, at);
    hi = std::max(hi, at);
  }
  if (v.firstActive < 0) return std::nullopt;
  // Positions relative to the aligned vector holding the lowest one.
  const int64_t base = floorDiv(lo, V) * V;
  if (hi - base >= V || lo == hi) return std::nullopt;
  for (int j = 0; j < V; ++j)
    if (m.active[size_t(j)]) v.voff[size_t(j)] = p.rho + p.delta[size_t(j)] - base;
  return v;
}

std::vector<const Value*> vectorInputs(const Graph& body, const std::vector<const Value*>& roots, int V) {
  std::map<const Value*, std::vector<LaneMap>> seen;
  std::set<const Value*> vectors;
  std::vector<std::pair<const Value*, LaneMap>> stack;
  for (const Value* r : roots) stack.push_back({r, outputLanes(r->type.shape, V)});
  while (!stack.empty()) {
    auto [v, m] = std::move(stack.back());
    stack.pop_back();
    auto& maps = seen[v];
    if (std::find(maps.begin(), maps.end(), m) != maps.end()) continue;
    maps.push_back(m);
    const Op& op = *v->def;
    if (op.kind == OpKind::Input) {
      if (isFloat(v->type.dtype) && vectorRead(v->type.shape, m, V)) vectors.insert(v);
      continue;
    }
    for (size_t k = 0; k < op.operands.size(); ++k) stack.push_back({op.operands[k], operandLanes(op, k, m, V)});
  }
  std::vector<const Value*> out;
  for (const Op* in : body.inputs())
    if (vectors.count(in->result())) out.push_back(in->result());
  return out;
}

}  // namespace fusec::codegen
