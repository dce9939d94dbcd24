#include "eager_comparison.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "bench/eager_model.h"
#include "frontend/init.h"
#include "frontend/program_state.h"

namespace fusec::test {

namespace {

struct Batch {
  HostTensor ids, targets;
};

HostTensor randomTokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t = HostTensor::zeros(Type{DType::i64, {B, T}});
  for (auto& v : t.i) v = int64_t(rng() % uint64_t(vocab));
  return t;
}

// `n` batches, each its own ids and targets (uniform random tokens).
std::vector<Batch> batches(const ComparisonCase& c, int n) {
  std::vector<Batch> out;
  for (int s = 0; s < n; ++s)
    out.push_back({randomTokens(c.batch, c.seq, c.cfg.vocab, c.seed + 1 + 2 * uint64_t(s)),
                   randomTokens(c.batch, c.seq, c.cfg.vocab, c.seed + 2 + 2 * uint64_t(s))});
  return out;
}

// sqrt(sum (got_k - want_k)^2 / sum want_k^2) for the values the two functions give.
template <class Got, class Want>
double normRel(size_t n, Got got, Want want) {
  double d = 0, w = 0;
  for (size_t k = 0; k < n; ++k) {
    const double wk = want(k), dk = got(k) - wk;
    d += dk * dk;
    w += wk * wk;
  }
  return w == 0 ? std::sqrt(d) : std::sqrt(d / w);
}

void checkSameShape(const HostTensor& got, const HostTensor& want, const std::string& what) {
  if (got.type.shape != want.type.shape)
    throw Error(what + ": compiled " + got.type.str() + " vs eager " + want.type.str());
}

// The train step's loss: its one output that updates no param.
size_t lossOutput(const Graph& g) {
  std::vector<size_t> plain;
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.updateOf(i).empty()) plain.push_back(i);
  if (plain.size() != 1 || g.outputs[plain[0]]->type != Type{DType::f32, {}})
    throw Error("train_step has " + std::to_string(plain.size()) + " outputs besides its updates, expected the loss f32[]");
  return plain[0];
}

HostTensor stepTensor(int step) {
  HostTensor s = HostTensor::zeros(Type{DType::f32, {}});
  s.f[0] = float(step);
  return s;
}

// The compiled train_step, built and bound to the initial weights and their program state.
struct CompiledTrainer {
  std::unique_ptr<Module> module;
  size_t loss = 0;
  std::unique_ptr<ProgramRunner> runner;
  int steps = 0;

  CompiledTrainer(const ComparisonCase& c, const Bindings& initial, const RunnerFactory& makeRunner)
      : module(planProgram(c.cfg, "train_step", c.dtype, c.batch, c.seq, c.adamw)) {
    const Graph& g = *module->funcs.at(0);
    loss = lossOutput(g);
    runner = makeRunner(g);
    Bindings env = initial;
    bindProgramState(g, env);  // zero moments, bf16 weight copies
    runner->bind(std::move(env));
  }

  float step(const Batch* b) {  // b: new tokens, or null to keep the bound ones
    Bindings in;
    if (b) in = {{"ids", b->ids}, {"targets", b->targets}};
    in["step"] = stepTensor(++steps);
    runner->bind(std::move(in));
    runner->run();
    return runner->output(loss).f.at(0);
  }
};

// Runs one stage of a comparison: an Error names the stage it came from (the eager model, the
// compiled forward, ...), and the stage's wall time is recorded.
template <class Fn>
auto stage(ComparisonTimes& times, const std::string& what, Fn&& fn) -> decltype(fn()) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Record {
    ComparisonTimes& times;
    const std::string& what;
    std::chrono::steady_clock::time_point t0;
    ~Record() { times.push_back({what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}); }
  } record{times, what, t0};
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

std::string kindOf(const std::string& name) {  // layers.12.attn.q_proj.weight -> layers.*.attn.q_proj.weight
  if (name.rfind("layers.", 0) != 0) return name;
  const size_t dot = name.find('.', 7);
  return "layers.*" + name.substr(dot);
}

}  // namespace

std::string ComparisonCase::label() const { return cfg.name + (dtype == DType::bf16 ? " bf16" : " fp32"); }

double normRelError(const HostTensor& got, const HostTensor& want, const std::string& what) {
  checkSameShape(got, want, what);
  return normRel(want.size(), [&](size_t k) { return got.get(k); }, [&](size_t k) { return want.get(k); });
}

namespace {
double maxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) worst = std::max(worst, std::fabs(double(a[k]) - double(b[k])));
  return a.size() == b.size() ? worst : INFINITY;
}
}  // namespace

double LossCurves::maxAbsDiff() const { return maxDiff(compiled, eager); }
double LossCurves::maxReorderedDiff() const { return reordered.empty() ? 0 : maxDiff(compiled, reordered); }

Bindings initWeights(const models::ModelConfig& cfg, uint64_t seed) {
  const std::vector<models::ParamSpec> specs = models::parameterSpecs(cfg);
  std::vector<HostTensor> values(specs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next++) < specs.size();) values[k] = initParameter(specs[k], seed);
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), specs.size());
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  Bindings out;
  for (size_t k = 0; k < specs.size(); ++k) out[specs[k].name] = std::move(values[k]);
  return out;
}

ComparisonResult compareWithEager(const ComparisonCase& c, const RunnerFactory& makeRunner) {
  ComparisonResult r;
  const Bindings initial = stage(r.seconds, "init weights", [&] { return initWeights(c.cfg, c.seed); });
  const std::vector<Batch> data = batches(c, c.steps);
  HostTensor eagerLogits;
  Bindings eagerParams;
  stage(r.seconds, "eager", [&] {
    bench::EagerModel eager(c.cfg, initial, bench::EagerOptions{c.eagerDevice, c.dtype});
    eagerLogits = eager.forward(data.at(0).ids);
    for (const Batch& b : data) r.eagerLosses.push_back(eager.trainStep(b.ids, b.targets, c.adamw));
    eagerParams = eager.parameters();
  });
  r.logits = stage(r.seconds, "compiled forward", [&] {
    auto m = planProgram(c.cfg, "forward", c.dtype, c.batch, c.seq);
    const Graph& g = *m->funcs.at(0);
    auto runner = makeRunner(g);
    Bindings env = initial;
    bindProgramState(g, env);  // bf16: the weights' bf16 copies are params of the forward too
    env["ids"] = data.at(0).ids;
    runner->bind(std::move(env));
    runner->run();
    return normRelError(runner->output(0), eagerLogits, "logits");
  });
  auto trainer = stage(r.seconds, "compiled train_step build", [&] {
    return std::make_unique<CompiledTrainer>(c, initial, makeRunner);
  });
  stage(r.seconds, "compiled train_step steps", [&] {
    for (size_t s = 0; s < data.size(); ++s) {
      r.compiledLosses.push_back(trainer->step(&data[s]));
      r.lossErrors.push_back(std::fabs(double(r.compiledLosses[s]) - r.eagerLosses[s]) / std::fabs(r.eagerLosses[s]));
    }
  });
  stage(r.seconds, "compare parameters", [&] {
    for (const auto& spec : models::parameterSpecs(c.cfg)) {
      const HostTensor got = trainer->runner->read(spec.name);
      const HostTensor& want = eagerParams.at(spec.name);
      const HostTensor& before = initial.at(spec.name);
      ParamError e{spec.name, normRelError(got, want, spec.name), 0};
      e.update = normRel(
          want.size(), [&](size_t k) { return got.get(k) - before.f[k]; },
          [&](size_t k) { return double(want.f[k]) - before.f[k]; });
      r.params.push_back(e);
    }
  });
  return r;
}

LossCurves lossCurves(const ComparisonCase& c, const RunnerFactory& makeRunner, CurveData kind,
                      const RunnerFactory& reorderedRunner) {
  LossCurves curves;
  const Bindings initial = stage(curves.seconds, "init weights", [&] { return initWeights(c.cfg, c.seed); });
  const std::vector<Batch> data = kind == CurveData::UniformStream ? batches(c, c.steps) : batches(c, 1);
  const size_t batchCount = data.size();
  stage(curves.seconds, "eager", [&] {
    bench::EagerModel eager(c.cfg, initial, bench::EagerOptions{c.eagerDevice, c.dtype});
    for (int s = 0; s < c.steps; ++s)
      curves.eager.push_back(eager.trainStep(data[size_t(s) % batchCount].ids, data[size_t(s) % batchCount].targets, c.adamw));
  });
  auto compiledCurve = [&](const RunnerFactory& factory, const std::string& what, std::vector<float>& losses) {
    auto trainer = stage(curves.seconds, what + " train_step build", [&] {
      return std::make_unique<CompiledTrainer>(c, initial, factory);
    });
    stage(curves.seconds, what + " train_step steps", [&] {
      for (int s = 0; s < c.steps; ++s) losses.push_back(trainer->step(&data[size_t(s) % batchCount]));
    });
  };
  compiledCurve(makeRunner, "compiled", curves.compiled);
  if (reorderedRunner) compiledCurve(reorderedRunner, "reordered", curves.reordered);
  return curves;
}

void printTimes(const std::string& label, const ComparisonTimes& times) {
  std::printf("[%s] seconds:", label.c_str());
  for (const auto& [what, sec] : times) std::printf(" %s %.2f;", what.c_str(), sec);
  std::printf("\n");
}

void printComparison(const ComparisonCase& c, const ComparisonResult& r) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%g", c.adamw.lr);
  const std::string at =
      "[" + c.label() + ", batch " + std::to_string(c.batch) + ", ctx " + std::to_string(c.seq) + ", lr " + lr + "] ";
  std::printf("%slogits: relative error %.3g\n", at.c_str(), r.logits);
  for (size_t s = 0; s < r.lossErrors.size(); ++s)
    std::printf("%sloss step %zu: compiled %.7f eager %.7f relative error %.3g\n", at.c_str(), s + 1,
                r.compiledLosses[s], r.eagerLosses[s], r.lossErrors[s]);
  std::map<std::string, std::pair<const ParamError*, const ParamError*>> byKind;  // worst weights, worst update
  const ParamError* worst = nullptr;
  for (const ParamError& e : r.params) {
    auto& [w, u] = byKind[kindOf(e.name)];
    if (!w || e.weights > w->weights) w = &e;
    if (!u || e.update > u->update) u = &e;
    if (!worst || e.weights > worst->weights) worst = &e;
  }
  for (const auto& [kind, wu] : byKind)
    std::printf("%sparams %s after %zu steps: weights %.3g (%s), update %.3g (%s)\n", at.c_str(), kind.c_str(),
                r.lossErrors.size(), wu.first->weights, wu.first->name.c_str(), wu.second->update,
                wu.second->name.c_str());
  if (worst) std::printf("%sparams: worst weights error %.3g (%s)\n", at.c_str(), worst->weights, worst->name.c_str());
  printTimes(c.label(), r.seconds);
}

}  // namespace fusec::test
