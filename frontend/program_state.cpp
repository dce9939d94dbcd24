#include "frontend/program_state.h"

namespace fusec {

namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void bindProgramState(const Graph& g, Bindings& env) {
  for (Op* p : g.params()) {
    const std::string& name = p->attrStr("name");
    const Type& t = p->result()->type;
    if (env.count(name)) continue;
    const std::string copySuffix = "." + std::string(dtypeName(t.dtype));
    if (endsWith(name, ".exp_avg") || endsWith(name, ".exp_avg_sq")) {
      env[name] = HostTensor::zeros(t);
    } else if (auto w = env.find(name.substr(0, name.size() - copySuffix.size()));
               endsWith(name, copySuffix) && w != env.end()) {
      if (int64_t(w->second.size()) != t.numel() || !isFloat(t.dtype))
        throw Error("internal: the program's param '" + name + "' is " + t.str() + ", its weight " + w->second.type.str());
      HostTensor copy = HostTensor::zeros(t);
      // roundToDType on floats: the generic HostTensor::set path rounds through double and
      // costs ~40 ns per element, seconds on a billion-parameter model.
      for (size_t k = 0; k < copy.size(); ++k) copy.f[k] = roundToDType(w->second.f[k], t.dtype);
      env[name] = std::move(copy);
    } else {
      throw Error("internal: the program's param '" + name + "' has no value");
    }
  }
}

}  // namespace fusec
