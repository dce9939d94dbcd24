#include "ir/graph.h"

#include <unordered_map>

#include "support/ptr_hash.h"

namespace fusec {

Error errorAt(const std::string& file, SourceLoc loc, const std::string& msg) {
  if (!loc.valid()) return Error(msg);
  return Error(file + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col) + ": error: " + msg, true);
}

std::string errorLine(const std::exception& e) {
  auto* fe = dynamic_cast<const Error*>(&e);
  if (fe && fe->located) return e.what();
  return std::string("error: ") + e.what();
}

const AttrValue& Op::attr(std::string_view n) const {
  int i = info().attrIndex(n);
  if (i < 0 || size_t(i) >= attrs.size())
    throw Error(std::string("internal: op '") + std::string(info().name) + "' has no attribute '" + std::string(n) + "'");
  return attrs[size_t(i)];
}
int64_t Op::attrInt(std::string_view n) const { return std::get<int64_t>(attr(n)); }
const std::vector<int64_t>& Op::attrInts(std::string_view n) const { return std::get<std::vector<int64_t>>(attr(n)); }
double Op::attrFloat(std::string_view n) const { return std::get<double>(attr(n)); }
bool Op::attrBool(std::string_view n) const { return std::get<bool>(attr(n)); }
const std::string& Op::attrStr(std::string_view n) const { return std::get<std::string>(attr(n)); }
void Op::setAttr(std::string_view n, AttrValue v) {
  int i = info().attrIndex(n);
  if (i < 0) throw Error(std::string("internal: op '") + std::string(info().name) + "' has no attribute '" + std::string(n) + "'");
  attrs.at(size_t(i)) = std::move(v);
}

std::unique_ptr<Op> makeOp(OpKind kind) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  for (const AttrSpec& s : opInfo(kind).attrs) {
    // Required ones get a placeholder the builder/parser overwrites. Built in place: GCC 12
    // saw the moved-from temporaries of push_back as maybe-uninitialized.
    if (s.defaultValue) op->attrs.push_back(*s.defaultValue);
    else switch (s.kind) {
      case AttrKind::Int: op->attrs.emplace_back(std::in_place_type<int64_t>, 0); break;
      case AttrKind::Ints: op->attrs.emplace_back(std::in_place_type<std::vector<int64_t>>); break;
      case AttrKind::Float: op->attrs.emplace_back(std::in_place_type<double>, 0.0); break;
      case AttrKind::Bool: op->attrs.emplace_back(std::in_place_type<bool>, false); break;
      case AttrKind::Str: op->attrs.emplace_back(std::in_place_type<std::string>); break;
    }
  }
  return op;
}

std::unique_ptr<Op> makePermute(Value* x, std::vector<int64_t> perm) {
  auto op = makeOp(OpKind::Permute);
  op->operands = {x};
  auto r = std::make_unique<Value>();
  r->type = Type{x->type.dtype, {}};
  for (int64_t a : perm) r->type.shape.push_back(x->type.shape[size_t(a)]);
  r->def = op.get();
  op->results.push_back(std::move(r));
  op->setAttr("perm", std::move(perm));
  return op;
}

Op* Graph::append(std::unique_ptr<Op> op) {
  for (size_t i = 0; i < op->results.size(); ++i) {
    op->results[i]->def = op.get();
    op->results[i]->index = int(i);
  }
  ops.push_back(std::move(op));
  return ops.back().get();
}

static std::vector<Op*> opsOfKind(const Graph& g, OpKind k) {
  std::vector<Op*> r;
  for (auto& op : g.ops)
    if (op->kind == k) r.push_back(op.get());
  return r;
}
std::vector<Op*> Graph::inputs() const { return opsOfKind(*this, OpKind::Input); }
std::vector<Op*> Graph::params() const { return opsOfKind(*this, OpKind::Param); }

static Op* findNamed(const Graph& g, OpKind k, std::string_view n) {
  for (auto& op : g.ops)
    if (op->kind == k && op->attrStr("name") == n) return op.get();
  return nullptr;
}
Op* Graph::findInput(std::string_view n) const { return findNamed(*this, OpKind::Input, n); }
Op* Graph::findParam(std::string_view n) const { return findNamed(*this, OpKind::Param, n); }

StringTable<const Op*> Graph::paramsByName() const {
  const std::vector<Op*> ps = params();
  StringTable<const Op*> byName(ps.size());
  for (const Op* p : ps) byName.emplace(p->attrStr("name"), p);
  return byName;
}

void Graph::replaceAllUses(Value* from, Value* to) {
  for (auto& op : ops)
    for (Value*& v : op->operands)
      if (v == from) v = to;
  for (Value*& v : outputs)
    if (v == from) v = to;
}

const std::string& Graph::updateOf(size_t i) const {
  static const std::string none;
  return i < outputUpdates.size() ? outputUpdates[i] : none;
}

void Graph::addOutput(Value* v, const std::string& updates) {
  const bool track = !updates.empty() || !outputUpdates.empty();
  if (track) outputUpdates.resize(outputs.size());
  outputs.push_back(v);
  if (track) outputUpdates.push_back(updates);
}

Graph* Module::find(std::string_view n) const {
  for (auto& f : funcs)
    if (f->name == n) return f.get();
  return nullptr;
}

Graph& Module::add(std::string n) {
  if (find(n)) throw Error("duplicate function @" + n);
  funcs.push_back(std::make_unique<Graph>());
  funcs.back()->name = std::move(n);
  return *funcs.back();
}

std::unique_ptr<Graph> cloneGraph(const Graph& g) {
  auto out = std::make_unique<Graph>();
  out->name = g.name;
  out->loc = g.loc;
  PtrMap<const Value*, Value*> map;
  for (auto& op : g.ops) {
    auto c = std::make_unique<Op>();
    c->kind = op->kind;
    c->attrs = op->attrs;
    c->loc = op->loc;
    for (Value* v : op->operands) c->operands.push_back(map.at(v));
    for (auto& r : op->results) {
      c->results.push_back(std::make_unique<Value>(*r));
      map[r.get()] = c->results.back().get();
    }
    if (op->body) c->body = cloneGraph(*op->body);
    out->append(std::move(c));
  }
  for (Value* v : g.outputs) out->outputs.push_back(map.at(v));
  out->outputUpdates = g.outputUpdates;
  return out;
}

std::unique_ptr<Module> cloneModule(const Module& m) {
  auto out = std::make_unique<Module>();
  out->sourceName = m.sourceName;
  for (auto& f : m.funcs) out->funcs.push_back(cloneGraph(*f));
  return out;
}

}  // namespace fusec
