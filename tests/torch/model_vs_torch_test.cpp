// fusec's programs against the LibTorch eager model (bench/eager_model) on the `tiny`
// TransformerLM (odd sizes: vocab 37, d_model 24, 3 heads, d_ff 40) with initParameters
// weights: logits, loss, every parameter's gradient, and the weights after three AdamW
// steps, both through the interpreter and through the `fusec run` binary. Differences are
// norm-wise relative, ||fusec - torch|| / ||torch||, and every test prints its worst one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "bench/eager_model.h"
#include "frontend/init.h"
#include "frontend/models/transformer.h"
#include "frontend/safetensors.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"

using namespace fusec;
namespace fs = std::filesystem;

namespace {

double relDiff(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.type, b.type);
  if (a.type != b.type) return INFINITY;
  double num = 0, den = 0;
  for (size_t k = 0; k < a.f.size(); ++k) {
    double d = double(a.f[k]) - double(b.f[k]);
    num += d * d;
    den += double(b.f[k]) * double(b.f[k]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

HostTensor randomTokens(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  HostTensor t = HostTensor::zeros(Type{DType::i64, {B, T}});
  for (auto& v : t.i) v = int64_t(rng() % uint32_t(vocab));
  return t;
}

struct Tiny : ::testing::Test {
  models::ModelConfig cfg = models::namedConfig("tiny");
  const int64_t B = 2, T = 7;  // odd T < ctx 16
  Bindings weights = initParameters(cfg, 1234);
  HostTensor ids = randomTokens(B, T, cfg.vocab, 1);
  HostTensor targets = randomTokens(B, T, cfg.vocab, 2);
};

HostTensor fusecLogits(const models::ModelConfig& cfg, const Bindings& weights, const HostTensor& ids) {
  Module m;
  Graph& g = models::buildForward(m, cfg, ids.type.shape[0], ids.type.shape[1]);
  Bindings env = weights;
  env["ids"] = ids;
  return interpret(g, env).at(0);
}

TEST_F(Tiny, ForwardLogitsMatchTorch) {
  bench::EagerModel eager(cfg, weights);
  double worst = 0;
  for (int64_t t : {int64_t(1), T, cfg.ctx}) {  // one token, odd, the full context (RoPE's last angles)
    HostTensor in = randomTokens(3, t, cfg.vocab, uint32_t(10 + t));
    double d = relDiff(fusecLogits(cfg, weights, in), eager.forward(in));
    EXPECT_LE(d, 1e-5) << "T=" << t;
    worst = std::max(worst, d);
  }
  std::printf("logits: max relative difference %.3g\n", worst);
}

// The comparison is sharp enough to see a small change of the model: another RoPE theta or
// RMSNorm eps in the reference moves the logits far beyond the tolerance.
TEST_F(Tiny, ComparisonDetectsAWrongModel) {
  HostTensor ours = fusecLogits(cfg, weights, ids);
  models::ModelConfig theta = cfg, eps = cfg;
  theta.ropeTheta = 5000;
  eps.eps = 1e-2;
  double dTheta = relDiff(ours, bench::EagerModel(theta, weights).forward(ids));
  double dEps = relDiff(ours, bench::EagerModel(eps, weights).forward(ids));
  std::printf("wrong theta: %.3g, wrong eps: %.3g\n", dTheta, dEps);
  EXPECT_GT(dTheta, 1e-3);
  EXPECT_GT(dEps, 1e-4);
}

// Loss and every gradient: the traced loss with appendGradients, interpreted, against
// autograd.
TEST_F(Tiny, LossAndGradientsMatchTorch) {
  Module m;
  Graph& g = m.add("grads");
  Builder b(g);
  auto params = models::declareParameters(b, cfg);
  fe::Tensor idsT = fe::input(b, "ids", ids.type), targetsT = fe::input(b, "targets", targets.type);
  fe::Tensor loss = fe::crossEntropy(models::traceLogits(cfg, params, idsT), targetsT);
  auto specs = models::parameterSpecs(cfg);
  std::vector<Value*> wrt;
  for (auto& s : specs) wrt.push_back(params.at(s.name).value());
  std::vector<Value*> grads = appendGradients(g, loss.value(), wrt);
  b.output(loss.value());
  for (Value* v : grads) b.output(v);
  Bindings env = weights;
  env["ids"] = ids;
  env["targets"] = targets;
  std::vector<HostTensor> outs = interpret(g, env);

  bench::EagerModel eager(cfg, weights);
  auto ref = eager.lossAndGradients(ids, targets);
  double lossDiff = std::fabs(double(outs[0].f[0]) - ref.loss) / std::fabs(ref.loss);
  std::printf("loss %.7f vs torch %.7f: relative difference %.3g\n", outs[0].f[0], ref.loss, lossDiff);
  EXPECT_LE(lossDiff, 1e-5);
  double worst = 0;
  std::string worstName;
  for (size_t k = 0; k < specs.size(); ++k) {
    double d = relDiff(outs[1 + k], ref.grads.at(specs[k].name));
    EXPECT_LE(d, 1e-5) << "gradient of " << specs[k].name;
    if (d > worst) worst = d, worstName = specs[k].name;
  }
  std::printf("gradients: max relative difference %.3g (%s)\n", worst, worstName.c_str());
}

// Three steps of the train_step program (AdamW state carried) against torch::optim::AdamW.
TEST_F(Tiny, ThreeAdamWStepsMatchTorch) {
  models::AdamWConfig adamw;
  adamw.lr = 1e-2;  // large enough that three steps move every weight visibly
  adamw.weightDecay = 0.1;
  Module m;
  Graph& g = models::buildTrainStep(m, cfg, B, T, adamw);
  auto specs = models::parameterSpecs(cfg);
  Bindings env = weights;
  for (auto& [n, t] : initAdamState(cfg)) env[n] = t;
  env["ids"] = ids;
  env["targets"] = targets;
  bench::EagerModel eager(cfg, weights);
  double worstLoss = 0;
  for (int step = 1; step <= 3; ++step) {
    HostTensor s = HostTensor::zeros(Type{DType::f32, {}});
    s.f[0] = float(step);
    env["step"] = s;
    std::vector<HostTensor> outs = interpret(g, env);
    for (size_t k = 0; k < specs.size(); ++k) {
      env[specs[k].name] = outs[1 + 3 * k];
      env[specs[k].name + ".exp_avg"] = outs[2 + 3 * k];
      env[specs[k].name + ".exp_avg_sq"] = outs[3 + 3 * k];
    }
    float refLoss = eager.trainStep(ids, targets, adamw);
    double d = std::fabs(double(outs[0].f[0]) - refLoss) / std::fabs(refLoss);
    EXPECT_LE(d, 1e-5) << "loss at step " << step;
    worstLoss = std::max(worstLoss, d);
  }
  Bindings ref = eager.parameters();
  double worst = 0, worstDelta = 0;
  for (auto& s : specs) {
    double d = relDiff(env.at(s.name), ref.at(s.name));
    EXPECT_LE(d, 1e-4) << s.name;
    worst = std::max(worst, d);
    // The updates themselves (weights after minus before), a much stricter view.
    HostTensor ours = env.at(s.name), theirs = ref.at(s.name);
    for (size_t k = 0; k < ours.f.size(); ++k) {
      ours.f[k] -= weights.at(s.name).f[k];
      theirs.f[k] -= weights.at(s.name).f[k];
    }
    worstDelta = std::max(worstDelta, relDiff(ours, theirs));
  }
  std::printf("3 AdamW steps: losses max relative difference %.3g, weights %.3g, updates %.3g\n", worstLoss, worst,
              worstDelta);
  EXPECT_LE(worstDelta, 1e-4);
}

// The same through the CLI: `fusec run` reads safetensors and writes safetensors.
int runFusec(const std::string& args) {
  int raw = std::system((std::string(FUSEC_BINARY) + " " + args).c_str());
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
}

TEST_F(Tiny, FusecRunMatchesTorch) {
  fs::path dir = fs::temp_directory_path() / ("fusec_torch_run_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string w = (dir / "w.safetensors").string(), in = (dir / "in.safetensors").string(),
              fwd = (dir / "fwd.safetensors").string(), trained = (dir / "trained.safetensors").string();
  ASSERT_EQ(runFusec("run --init-weights " + w + " --model tiny --seed 99"), 0);
  Bindings inputs;
  inputs["ids"] = ids;
  inputs["targets"] = targets;
  saveSafetensors(in, inputs);
  ASSERT_EQ(runFusec("run --program forward --model tiny --weights " + w + " --inputs " + in + " --out " + fwd), 0);
  ASSERT_EQ(runFusec("run --program train_step --model tiny --steps 3 --lr 0.01 --betas 0.9,0.99 --eps 1e-8 "
                     "--weight-decay 0.1 --weights " + w + " --inputs " + in + " --out " + trained),
            0);
  Bindings wts = loadSafetensors(w);
  bench::EagerModel eager(cfg, wts);
  double dLogits = relDiff(loadSafetensors(fwd).at("logits"), eager.forward(ids));
  EXPECT_LE(dLogits, 1e-5);

  models::AdamWConfig adamw;
  adamw.lr = 0.01;
  adamw.beta2 = 0.99;
  adamw.weightDecay = 0.1;
  Bindings out = loadSafetensors(trained);
  ASSERT_EQ(out.at("loss").type.str(), "f32[3]");
  double worstLoss = 0, worst = 0;
  for (int s = 0; s < 3; ++s) {
    float ref = eager.trainStep(ids, targets, adamw);
    worstLoss = std::max(worstLoss, std::fabs(double(out.at("loss").f[size_t(s)]) - ref) / std::fabs(ref));
  }
  EXPECT_LE(worstLoss, 1e-5);
  Bindings ref = eager.parameters();
  for (auto& s : models::parameterSpecs(cfg)) worst = std::max(worst, relDiff(out.at(s.name), ref.at(s.name)));
  EXPECT_LE(worst, 1e-4);
  std::printf("fusec run: logits %.3g, losses %.3g, weights after 3 steps %.3g\n", dLogits, worstLoss, worst);
  fs::remove_all(dir);
}

}  // namespace
