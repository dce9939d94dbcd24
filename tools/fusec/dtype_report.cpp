#include "tools/fusec/dtype_report.h"

#include <map>

namespace fusec::cli {

namespace {

bool isSource(const Op& op) { return op.info().category == OpCategory::Source && op.kind != OpKind::Iota; }

// "<label> <dtype>" when every entry agrees, else "<name> <dtype>" for each.
void printCollapsed(const std::string& label, const std::vector<std::pair<std::string, DType>>& entries,
                    std::ostream& out) {
  if (entries.empty()) return;
  bool same = true;
  for (auto& e : entries) same = same && e.second == entries[0].second;
  if (same) {
    out << label << " " << dtypeName(entries[0].second) << "\n";
    return;
  }
  for (auto& [name, d] : entries) out << name << " " << dtypeName(d) << "\n";
}

}  // namespace

TracedNames recordTracedNames(const Graph& g) {
  TracedNames t;
  for (Op* p : g.params()) t.params.push_back(p->attrStr("name"));
  for (auto& op : g.ops)
    if (!isSource(*op))
      for (auto& r : op->results)
        if (!r->name.empty()) t.values.push_back(r->name);
  return t;
}

void printDTypes(const Graph& g, const TracedNames& traced, std::ostream& out) {
  std::map<std::string, const Value*> byName;
  for (auto& op : g.ops)
    for (auto& r : op->results)
      if (!r->name.empty()) byName[r->name] = r.get();

  std::vector<std::pair<std::string, DType>> params, grads;
  for (const std::string& name : traced.params) {
    Op* p = g.findParam(name);
    if (!p) throw Error("--print-dtypes: param '" + name + "' of the trace is gone after the program passes");
    params.emplace_back(name, p->result()->type.dtype);
  }
  printCollapsed("params", params, out);
  for (const std::string& name : traced.values) {
    auto it = byName.find(name);
    if (it == byName.end()) throw Error("--print-dtypes: value '" + name + "' of the trace is gone after the program passes");
    out << name << " " << dtypeName(it->second->type.dtype) << "\n";
  }
  for (const std::string& name : traced.params)
    if (auto it = byName.find(name + ".grad"); it != byName.end()) grads.emplace_back(it->first, it->second->type.dtype);
  printCollapsed("gradients", grads, out);
}

}  // namespace fusec::cli
