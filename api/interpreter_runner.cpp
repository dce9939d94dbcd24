#include "api/runner.h"
#include "ir/interpreter.h"

namespace fusec::api {

namespace {

class InterpreterRunner final : public ProgramRunner {
 public:
  explicit InterpreterRunner(const Graph& g) : g_(g) {}

  void bind(Bindings&& values) override {
    for (auto& [name, t] : values)
      if (g_.findInput(name) || g_.findParam(name)) env_[name] = std::move(t);
    values.clear();
  }

  void run() override {
    outs_ = interpret(g_, env_);
    for (size_t i = 0; i < outs_.size(); ++i)
      if (const std::string& target = g_.updateOf(i); !target.empty()) env_[target] = outs_[i];
  }

  HostTensor output(size_t i) override {
    if (i >= outs_.size()) throw Error("interpreter runner: no output " + std::to_string(i) + " (run first)");
    return outs_[i];
  }

  HostTensor read(const std::string& name) override {
    auto it = env_.find(name);
    if (it == env_.end()) throw Error("interpreter runner: '" + name + "' was never bound");
    return it->second;
  }

 private:
  const Graph& g_;
  Bindings env_;
  std::vector<HostTensor> outs_;
};

}  // namespace

std::unique_ptr<ProgramRunner> interpreterRunner(const Graph& g) { return std::make_unique<InterpreterRunner>(g); }

}  // namespace fusec::api
