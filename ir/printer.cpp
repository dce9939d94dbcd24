#include "ir/printer.h"

#include <charconv>
#include <cmath>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "support/ptr_hash.h"

namespace fusec {

std::string formatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, res.ptr);
}

static std::string quote(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { r += '\\'; r += char(c); }
    else if (c == '\n') r += "\\n";
    else if (c == '\t') r += "\\t";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else r += char(c);
  }
  return r + "\"";
}

std::string formatAttr(const AttrValue& v) {
  struct Visitor {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(const std::vector<int64_t>& xs) const {
      std::string r = "[";
      for (size_t i = 0; i < xs.size(); ++i) r += (i ? ", " : "") + std::to_string(xs[i]);
      return r + "]";
    }
    std::string operator()(double x) const { return formatFloat(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return quote(x); }
  };
  return std::visit(Visitor{}, v);
}

namespace {

class Printer {
 public:
  explicit Printer(std::ostream& os) : os_(os) {}

  void func(const Graph& g) {
    os_ << "func @" << g.name << " {\n";
    body(g, 1);
    os_ << "}\n";
  }

 private:
  // Prints the ops and return of `g` at `depth`; `g` is its own naming scope.
  // Unnamed values are numbered in order: %0, %1, ... in a function, %k0, %k1, ... in a
  // kernel body (its own scope), so a body's values never read as the enclosing graph's. A
  // body value that is itself named kN keeps its name and the numbering skips N.
  void body(const Graph& g, int depth) {
    PtrMap<const Value*, std::string> names;
    const std::string prefix = depth > 1 ? "k" : "";
    std::unordered_set<std::string> taken;
    if (!prefix.empty())
      for (auto& op : g.ops)
        for (auto& r : op->results)
          if (!r->name.empty()) taken.insert(r->name);
    int counter = 0;
    auto fresh = [&] {
      std::string n = prefix + std::to_string(counter++);
      while (taken.count(n)) n = prefix + std::to_string(counter++);
      return n;
    };
    auto nameOf = [&](const Value* v) -> const std::string& {
      auto it = names.find(v);
      if (it != names.end()) return it->second;
      // Not defined in this graph: the verifier rejects this; print something visible.
      static const std::string bad = "%<undefined>";
      return bad;
    };
    std::string indent(size_t(depth) * 2, ' ');
    // Lists (results, operands, result types, returned values) wrap past kWidth columns, the
    // continuation indented: a multi_tensor AdamW kernel's results were one 49,193-column line.
    const std::string more = indent + "    ";
    std::string line;
    size_t col = 0;
    auto put = [&](const std::string& t) { line += t, col += t.size(); };
    auto item = [&](size_t i, const std::string& t) {
      if (i && col + 2 + t.size() > kWidth) line += ",\n" + more, col = more.size();
      else if (i) put(", ");
      put(t);
    };
    auto flush = [&] {
      os_ << line << "\n";
      line.clear(), col = 0;
    };
    if (depth == 1) names = valueNames(g);  // the function's scope: one numbering, shared
    for (auto& op : g.ops) {
      if (depth > 1)
        for (auto& r : op->results) names[r.get()] = "%" + (r->name.empty() ? fresh() : r->name);
      put(indent);
      for (size_t i = 0; i < op->results.size(); ++i) item(i, names[op->results[i].get()]);
      const OpInfo& info = op->info();
      put(" = " + std::string(info.name) + "(");
      for (size_t i = 0; i < op->operands.size(); ++i) item(i, nameOf(op->operands[i]));
      put(")");
      bool first = true;
      for (size_t i = 0; i < info.attrs.size() && i < op->attrs.size(); ++i) {
        const AttrSpec& spec = info.attrs[i];
        if (spec.defaultValue && *spec.defaultValue == op->attrs[i]) continue;
        put((first ? " {" : ", ") + std::string(spec.name) + " = " + formatAttr(op->attrs[i]));
        first = false;
      }
      if (!first) put("}");
      put(" :");
      for (size_t i = 0; i < op->results.size(); ++i) {
        std::string t = op->results[i]->type.str();
        if (op->results[i]->offset >= 0) t += " @" + std::to_string(op->results[i]->offset);
        if (i == 0) put(" " + t);
        else item(i, t);
      }
      if (op->body) {
        put(" {");
        flush();
        body(*op->body, depth + 1);
        put(indent + "}");
      }
      flush();
    }
    put(indent + "return");
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      std::string t = nameOf(g.outputs[i]);
      if (!g.updateOf(i).empty()) t += " -> " + quote(g.updateOf(i));
      if (i == 0) put(" " + t);
      else item(i, t);
    }
    flush();
  }

  static constexpr size_t kWidth = 120;
  std::ostream& os_;
};

}  // namespace

PtrMap<const Value*, std::string> valueNames(const Graph& g) {
  PtrMap<const Value*, std::string> names;
  int counter = 0;
  for (auto& op : g.ops)
    for (auto& r : op->results) names[r.get()] = "%" + (r->name.empty() ? std::to_string(counter++) : r->name);
  return names;
}

void print(const Module& m, std::ostream& os) {
  Printer p(os);
  for (size_t i = 0; i < m.funcs.size(); ++i) {
    if (i) os << "\n";
    p.func(*m.funcs[i]);
  }
}

std::string printModule(const Module& m) {
  std::ostringstream os;
  print(m, os);
  return os.str();
}

std::string printGraph(const Graph& g) {
  std::ostringstream os;
  Printer(os).func(g);
  return os.str();
}

}  // namespace fusec
