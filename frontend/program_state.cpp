#include "frontend/program_state.h"

#include "ir/roles.h"

namespace fusec {

void bindProgramState(const Graph& g, Bindings& env, std::optional<int64_t> rank) {
  for (Op* p : g.params()) {
    const std::string& name = p->attrStr("name");
    const Type& t = p->result()->type;
    if (env.count(name)) continue;
    switch (roleOf(*p)) {
      case Role::ExpAvg:
      case Role::ExpAvgSq: env[name] = HostTensor::zeros(t); break;
      case Role::WeightCopy: {
        auto w = env.find(ownerOf(*p));
        if (w == env.end())
          throw Error("internal: the program's param '" + name + "' copies '" + ownerOf(*p) + "', which has no value");
        if (int64_t(w->second.size()) != t.numel() || !isFloat(t.dtype))
          throw Error("internal: the program's param '" + name + "' is " + t.str() + ", its weight " + w->second.type.str());
        HostTensor copy = HostTensor::zeros(t);
        // roundToDType on floats: the generic HostTensor::set path rounds through double and
        // costs ~40 ns per element, seconds on a billion-parameter model.
        for (size_t k = 0; k < copy.size(); ++k) copy.f[k] = roundToDType(w->second.f[k], t.dtype);
        env[name] = std::move(copy);
        break;
      }
      default: throw Error("internal: the program's param '" + name + "' has no value");
    }
  }
  // After the copies, which are made from the whole weights.
  for (Op* p : g.params()) {
    const int64_t ranks = p->attrInt("ranks");
    const Type& t = p->result()->type;
    HostTensor& w = env.at(p->attrStr("name"));
    if (ranks == 1 || w.type == t) continue;
    Type whole = t;
    whole.shape.at(0) *= ranks;
    if (w.type != whole)
      throw Error("internal: the program's param '" + p->attrStr("name") + "' is one rank's rows " + t.str() +
                  " of a " + whole.str() + " weight, bound to " + w.type.str());
    if (!rank || *rank < 0 || *rank >= ranks)
      throw Error("internal: the program's param '" + p->attrStr("name") + "' holds one rank's rows of " +
                  std::to_string(ranks) + "; bind it with the rank");
    HostTensor rows = HostTensor::zeros(t);
    const size_t block = rows.size();
    std::copy(w.f.begin() + std::ptrdiff_t(size_t(*rank) * block), w.f.begin() + std::ptrdiff_t(size_t(*rank + 1) * block),
              rows.f.begin());
    w = std::move(rows);
  }
}

}  // namespace fusec
