// The frontend: the Tensor tracing API (broadcasting, layout, nn helpers), the CS336
// TransformerLM (sizes, parameter names and counts, the traced forward against an independent
// plain-C++ reference in double, the train step), AdamW and weight initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "frontend/init.h"
#include "frontend/models/attention.h"
#include "frontend/models/transformer.h"
#include "frontend/optim.h"
#include "frontend/tensor.h"
#include "ir/interpreter.h"
#include "test_util.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace fusec;
using namespace fusec::test;
using fe::Tensor;
using models::ModelConfig;

namespace {



HostTensor tensorOf(Type t, std::vector<float> v) {
  HostTensor h = HostTensor::zeros(t);
  EXPECT_EQ(v.size(), h.size());
  for (size_t k = 0; k < v.size() && k < h.size(); ++k) h.set(k, v[k]);
  return h;
}

HostTensor randomTensor(Type t, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  HostTensor h = HostTensor::zeros(t);
  std::uniform_real_distribution<double> u(lo, hi);
  for (size_t k = 0; k < h.size(); ++k) h.set(k, u(rng));
  return h;
}

HostTensor randomIds(Shape s, int64_t vocab, std::mt19937_64& rng) {
  HostTensor h = HostTensor::zeros(i64(std::move(s)));
  for (auto& x : h.i) x = int64_t(rng() % uint64_t(vocab));
  return h;
}

// ---------------------------------------------------------------------------------------
// Tensor API

TEST(FrontendTensor, BroadcastShapes) {
  EXPECT_EQ(fe::broadcastShapes({2, 3, 1}, {4}), (Shape{2, 3, 4}));
  EXPECT_EQ(fe::broadcastShapes({}, {5, 1}), (Shape{5, 1}));
  EXPECT_EQ(fe::broadcastShapes({1, 7}, {6, 1}), (Shape{6, 7}));
  EXPECT_EQ(errorOf([] { fe::broadcastShapes({2, 3}, {4}); }), "cannot broadcast [2,3] with [4]");
}

TEST(FrontendTensor, BroadcastingArithmeticMatchesNumpy) {
  Module m;
  Builder b(m.add("f"));
  Tensor x = fe::input(b, "x", f32({2, 3, 1}));
  Tensor y = fe::input(b, "y", f32({4}));
  Tensor s = x + y;                     // [2,3,4]
  Tensor t = 2.0 * s - 1.0;             // scalars on either side
  Tensor u = (1.0 - x) / y.reshape({1, 1, 4});
  EXPECT_EQ(s.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(u.shape(), (Shape{2, 3, 4}));
  b.output(t.value());
  b.output(u.value());
  ASSERT_NO_THROW(verify(m));
  std::vector<float> xv = {1, 2, 3, 4, 5, 6}, yv = {10, 20, 30, 40};
  auto out = interpret(*m.funcs[0], {{"x", tensorOf(f32({2, 3, 1}), xv)}, {"y", tensorOf(f32({4}), yv)}});
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) {
      EXPECT_FLOAT_EQ(out[0].f[size_t(i * 4 + j)], 2 * (xv[size_t(i)] + yv[size_t(j)]) - 1);
      EXPECT_FLOAT_EQ(out[1].f[size_t(i * 4 + j)], (1 - xv[size_t(i)]) / yv[size_t(j)]);
    }
}

TEST(FrontendTensor, ReductionsLayoutAndWhere) {
  Module m;
  Builder b(m.add("f"));
  Tensor x = fe::input(b, "x", f32({2, 3}));
  EXPECT_EQ(x.sum({-1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(x.mean({0}).shape(), (Shape{3}));
  EXPECT_EQ(x.max({0, 1}).shape(), (Shape{}));
  EXPECT_EQ(x.reshape({-1}).shape(), (Shape{6}));
  EXPECT_EQ(x.view({3, -1}).shape(), (Shape{3, 2}));
  EXPECT_EQ(x.transpose(0, 1).shape(), (Shape{3, 2}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(x.permute({0, 1}).value(), x.value());  // identity permute records nothing
  EXPECT_NE(errorOf([&] { x.reshape({4, -1}); }).find("cannot infer"), std::string::npos);
  {
    Module other;
    Builder ob(other.add("g"));
    Tensor a = fe::input(ob, "a", f32({2, 3})), n = fe::input(ob, "n", i64({2, 3}));
    EXPECT_NE(errorOf([&] { a + n; }).find("same type"), std::string::npos);
    EXPECT_NE(errorOf([&] { a + x; }).find("different graphs"), std::string::npos);
  }

  // x - max(x) with a keepdim reduction broadcast back; where with a broadcast mask.
  Tensor centered = x - x.max({-1}, true);
  Tensor mask = fe::lt(fe::arange(b, 3), fe::full(b, {3}, 1, DType::i64));  // [true, false, false]
  Tensor filled = x.maskedFill(mask, -5);
  b.output(centered.value());
  b.output(filled.value());
  b.output(x.softmax(-1).value());
  ASSERT_NO_THROW(verify(m));
  auto out = interpret(*m.funcs[0], {{"x", tensorOf(f32({2, 3}), {1, 5, 2, -1, 0, 3})}});
  EXPECT_EQ(out[0].f, (std::vector<float>{-4, 0, -3, -4, -3, 0}));
  EXPECT_EQ(out[1].f, (std::vector<float>{-5, 5, 2, -5, 0, 3}));
  float rowSum = out[2].f[0] + out[2].f[1] + out[2].f[2];
  EXPECT_NEAR(rowSum, 1.0f, 1e-6f);
}

TEST(FrontendTensor, EmbeddingIsGatherWithBroadcastIndex) {
  Module m;
  Builder b(m.add("f"));
  Tensor w = fe::param(b, "w", f32({5, 3}));
  Tensor ids = fe::input(b, "ids", i64({2, 2}));
  Tensor e = fe::embedding(w, ids);
  EXPECT_EQ(e.shape(), (Shape{2, 2, 3}));
  b.output(e.value());
  ASSERT_NO_THROW(verify(m));
  std::vector<float> wv(15);
  std::iota(wv.begin(), wv.end(), 0.0f);
  HostTensor idv = HostTensor::zeros(i64({2, 2}));
  idv.i = {4, 0, 2, 2};
  auto out = interpret(*m.funcs[0], {{"w", tensorOf(f32({5, 3}), wv)}, {"ids", idv}});
  EXPECT_EQ(out[0].f, (std::vector<float>{12, 13, 14, 0, 1, 2, 6, 7, 8, 6, 7, 8}));
}

TEST(FrontendTensor, ExplicitAttentionMatchesComposite) {
  Module m;
  Builder b(m.add("f"));
  Type t = f32({2, 5, 4});
  Tensor q = fe::input(b, "q", t), k = fe::input(b, "k", t), v = fe::input(b, "v", t);
  b.output(fe::attention(q, k, v, true, 0.5).value());
  b.output(fe::attentionExplicit(q, k, v, true, 0.5).value());
  ASSERT_NO_THROW(verify(m));
  std::mt19937_64 rng(7);
  auto out = interpret(*m.funcs[0], {{"q", randomTensor(t, rng)}, {"k", randomTensor(t, rng)}, {"v", randomTensor(t, rng)}});
  for (size_t i = 0; i < out[0].size(); ++i) EXPECT_NEAR(out[0].f[i], out[1].f[i], 1e-6);
}

// ---------------------------------------------------------------------------------------
// Model configuration and parameters

TEST(FrontendModel, ParameterCountsOfEverySize) {
  EXPECT_EQ(models::parameterCount(models::namedConfig("small")), 128'625'408);
  EXPECT_EQ(models::parameterCount(models::namedConfig("large")), 969'411'840);
  // The others from the formula 2 V d + L (4 d^2 + 3 d f + 2 d) + d.
  for (const char* name : {"small", "medium", "large", "xl", "2.7B", "tiny"}) {
    ModelConfig c = models::namedConfig(name);
    int64_t d = c.dModel, f = c.dFF;
    EXPECT_EQ(models::parameterCount(c), 2 * c.vocab * d + c.layers * (4 * d * d + 3 * d * f + 2 * d) + d) << name;
  }
  EXPECT_EQ(models::parameterCount(models::namedConfig("medium")), 423'183'360);
  EXPECT_EQ(models::parameterCount(models::namedConfig("xl")), 1'998'235'200);
  EXPECT_EQ(models::parameterCount(models::namedConfig("2.7B")), 3'406'809'600);
  ModelConfig xl = models::namedConfig("xl");
  EXPECT_EQ(xl.dModel / xl.heads, 64);
  EXPECT_EQ(xl.vocab, 10000);
  EXPECT_EQ(xl.ctx, 1024);
  EXPECT_EQ(xl.ropeTheta, 10000);
}

TEST(FrontendModel, StateDictNamesShapesAndOrder) {
  ModelConfig c = models::namedConfig("small");
  auto specs = models::parameterSpecs(c);
  ASSERT_EQ(specs.size(), size_t(9 * c.layers + 3));
  EXPECT_EQ(specs.front().name, "token_embeddings.weight");
  EXPECT_EQ(specs.front().shape, (Shape{10000, 768}));
  EXPECT_EQ(specs.front().init, models::Init::Embedding);
  const char* layer0[] = {"layers.0.attn.q_proj.weight", "layers.0.attn.k_proj.weight", "layers.0.attn.v_proj.weight",
                          "layers.0.attn.output_proj.weight", "layers.0.ffn.w1.weight", "layers.0.ffn.w2.weight",
                          "layers.0.ffn.w3.weight", "layers.0.ln1.weight", "layers.0.ln2.weight"};
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(specs[1 + i].name, layer0[i]);
  EXPECT_EQ(specs[5].shape, (Shape{3072, 768}));  // w1 [d_ff, d_model]
  EXPECT_EQ(specs[6].shape, (Shape{768, 3072}));  // w2 [d_model, d_ff]
  EXPECT_EQ(specs[8].init, models::Init::Ones);
  EXPECT_EQ(specs[specs.size() - 3].name, "layers.11.ln2.weight");
  EXPECT_EQ(specs[specs.size() - 2].name, "ln_final.weight");
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  EXPECT_EQ(specs.back().shape, (Shape{10000, 768}));
  EXPECT_EQ(specs.back().init, models::Init::Linear);
}

TEST(FrontendModel, ConfigErrors) {
  EXPECT_EQ(errorOf([] { models::namedConfig("huge"); }),
            "unknown model 'huge' (known: small, medium, large, xl, 2.7B, tiny)");
  ModelConfig c = models::namedConfig("tiny");
  c.heads = 5;
  EXPECT_NE(errorOf([&] { models::validate(c); }).find("not divisible by heads"), std::string::npos);
  c = models::namedConfig("tiny");
  c.heads = 8;  // d_head 3
  EXPECT_NE(errorOf([&] { models::validate(c); }).find("must be even"), std::string::npos);
  c = models::namedConfig("tiny");
  c.layers = 0;
  EXPECT_NE(errorOf([&] { models::validate(c); }).find("layers must be positive"), std::string::npos);
  Module m;
  EXPECT_NE(errorOf([&] { models::buildForward(m, models::namedConfig("tiny"), 1, 17); }).find("exceeds the context"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------
// The independent reference: the CS336 TransformerLM in plain loops and double.

struct Reference {
  const ModelConfig& c;
  const Bindings& w;

  const std::vector<float>& W(const std::string& n) const { return w.at(n).f; }

  // y[r, o] = sum_i x[r, i] W[o, i]
  std::vector<double> linear(const std::vector<double>& x, const std::string& name, int64_t in, int64_t out) const {
    const auto& Wt = W(name);
    const int64_t rows = int64_t(x.size()) / in;
    std::vector<double> y(size_t(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t i = 0; i < in; ++i) acc += x[size_t(r * in + i)] * double(Wt[size_t(o * in + i)]);
        y[size_t(r * out + o)] = acc;
      }
    return y;
  }

  std::vector<double> rmsnorm(const std::vector<double>& x, const std::string& name) const {
    const int64_t d = c.dModel, rows = int64_t(x.size()) / d;
    const auto& g = W(name);
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += x[size_t(r * d + j)] * x[size_t(r * d + j)];
      double inv = 1 / std::sqrt(ss / double(d) + c.eps);
      for (int64_t j = 0; j < d; ++j) y[size_t(r * d + j)] = x[size_t(r * d + j)] * inv * double(g[size_t(j)]);
    }
    return y;
  }

  // logits [B, T, V] for ids [B, T]
  std::vector<double> forward(const std::vector<int64_t>& ids, int64_t B, int64_t T) const {
    const int64_t d = c.dModel, H = c.heads, dh = d / H, V = c.vocab, F = c.dFF;
    std::vector<double> x(size_t(B * T * d));
    const auto& E = W("token_embeddings.weight");
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t j = 0; j < d; ++j) x[size_t(r * d + j)] = E[size_t(ids[size_t(r)] * d + j)];
    for (int64_t l = 0; l < c.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      auto h = rmsnorm(x, p + "ln1.weight");
      auto q = linear(h, p + "attn.q_proj.weight", d, d);
      auto k = linear(h, p + "attn.k_proj.weight", d, d);
      auto v = linear(h, p + "attn.v_proj.weight", d, d);
      // RoPE per head on adjacent pairs: angle = t * theta^(-2i/dh).
      for (auto* t : {&q, &k})
        for (int64_t r = 0; r < B * T; ++r)
          for (int64_t hd = 0; hd < H; ++hd)
            for (int64_t i = 0; i < dh / 2; ++i) {
              const double pos = double(r % T), ang = pos * std::pow(c.ropeTheta, -double(2 * i) / double(dh));
              double& a = (*t)[size_t(r * d + hd * dh + 2 * i)];
              double& bb = (*t)[size_t(r * d + hd * dh + 2 * i + 1)];
              const double a0 = a, b0 = bb;
              a = a0 * std::cos(ang) - b0 * std::sin(ang);
              bb = a0 * std::sin(ang) + b0 * std::cos(ang);
            }
      std::vector<double> o(x.size(), 0.0);
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t hd = 0; hd < H; ++hd)
          for (int64_t i = 0; i < T; ++i) {
            auto at = [&](const std::vector<double>& t, int64_t pos, int64_t ch) {
              return t[size_t((bi * T + pos) * d + hd * dh + ch)];
            };
            std::vector<double> s(size_t(i + 1));
            double mx = -INFINITY;
            for (int64_t j = 0; j <= i; ++j) {
              double dot = 0;
              for (int64_t ch = 0; ch < dh; ++ch) dot += at(q, i, ch) * at(k, j, ch);
              s[size_t(j)] = dot / std::sqrt(double(dh));
              mx = std::max(mx, s[size_t(j)]);
            }
            double sum = 0;
            for (auto& e : s) sum += (e = std::exp(e - mx));
            for (int64_t ch = 0; ch < dh; ++ch) {
              double acc = 0;
              for (int64_t j = 0; j <= i; ++j) acc += s[size_t(j)] / sum * at(v, j, ch);
              o[size_t((bi * T + i) * d + hd * dh + ch)] = acc;
            }
          }
      auto attnOut = linear(o, p + "attn.output_proj.weight", d, d);
      for (size_t z = 0; z < x.size(); ++z) x[z] += attnOut[z];
      auto h2 = rmsnorm(x, p + "ln2.weight");
      auto a = linear(h2, p + "ffn.w1.weight", d, F);
      auto u = linear(h2, p + "ffn.w3.weight", d, F);
      for (size_t z = 0; z < a.size(); ++z) a[z] = a[z] / (1 + std::exp(-a[z])) * u[z];
      auto y = linear(a, p + "ffn.w2.weight", F, d);
      for (size_t z = 0; z < x.size(); ++z) x[z] += y[z];
    }
    return linear(rmsnorm(x, "ln_final.weight"), "lm_head.weight", d, V);
  }

  double loss(const std::vector<int64_t>& ids, const std::vector<int64_t>& targets, int64_t B, int64_t T) const {
    auto logits = forward(ids, B, T);
    const int64_t V = c.vocab;
    double total = 0;
    for (int64_t r = 0; r < B * T; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[size_t(r * V + j)]);
      for (int64_t j = 0; j < V; ++j) s += std::exp(logits[size_t(r * V + j)] - mx);
      total += mx + std::log(s) - logits[size_t(r * V + targets[size_t(r)])];
    }
    return total / double(B * T);
  }
};

double relativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

TEST(FrontendModel, TinyForwardRunsAndMatchesTheReference) {
  ModelConfig c = models::namedConfig("tiny");
  const int64_t B = 2, T = 7;
  Module m;
  Graph& g = models::buildForward(m, c, B, T);
  ASSERT_NO_THROW(verify(m));
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0]->type, f32({B, T, c.vocab}));
  EXPECT_EQ(g.params().size(), models::parameterSpecs(c).size());
  EXPECT_EQ(g.params().front()->attrStr("name"), "token_embeddings.weight");
  EXPECT_EQ(g.findInput("ids")->result()->type, i64({B, T}));

  Bindings env = initParameters(c, 1234);
  std::mt19937_64 rng(5);
  env["ids"] = randomIds({B, T}, c.vocab, rng);
  auto out = interpret(g, env);
  ASSERT_EQ(out[0].type, f32({B, T, c.vocab}));
  for (float v : out[0].f) ASSERT_TRUE(std::isfinite(v));

  Reference ref{c, env};
  auto want = ref.forward(env["ids"].i, B, T);
  EXPECT_LT(relativeError(out[0].f, want), 1e-5);
  double maxRel = 0, scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) maxRel = std::max(maxRel, std::abs(double(out[0].f[i]) - want[i]) / scale);
  EXPECT_LT(maxRel, 1e-5);
}

TEST(FrontendModel, AttentionProgram) {
  Module m;
  Graph& g = models::buildAttention(m, 2, 6, 8);
  ASSERT_NO_THROW(verify(m));
  EXPECT_EQ(g.inputs().size(), 3u);
  EXPECT_EQ(g.outputs[0]->type, f32({2, 6, 8}));
  std::mt19937_64 rng(3);
  Type t = f32({2, 6, 8});
  Bindings env{{"q", randomTensor(t, rng)}, {"k", randomTensor(t, rng)}, {"v", randomTensor(t, rng)}};
  auto out = interpret(g, env);
  // Row 0 attends to key 0 only: its output is v[0].
  for (int c = 0; c < 8; ++c) EXPECT_FLOAT_EQ(out[0].f[size_t(c)], env["v"].f[size_t(c)]);
}

TEST(FrontendModel, TinyTrainStepRunsOneStep) {
  ModelConfig c = models::namedConfig("tiny");
  const int64_t B = 2, T = 6;
  models::AdamWConfig opt;
  Module m;
  Graph& g = models::buildTrainStep(m, c, B, T, opt);
  ASSERT_NO_THROW(verify(m));
  auto specs = models::parameterSpecs(c);
  ASSERT_EQ(g.outputs.size(), 1 + 3 * specs.size());
  EXPECT_EQ(g.outputs[0]->type, f32({}));
  EXPECT_EQ(g.params().size(), 3 * specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(g.outputs[1 + 3 * i + size_t(k)]->type.shape, specs[i].shape);
  EXPECT_EQ(g.findInput("step")->result()->type, f32({}));

  Bindings env = initParameters(c, 99);
  for (auto& [k, v] : initAdamState(c)) env[k] = v;
  std::mt19937_64 rng(11);
  env["ids"] = randomIds({B, T}, c.vocab, rng);
  env["targets"] = randomIds({B, T}, c.vocab, rng);
  env["step"] = tensorOf(f32({}), {1});
  auto out = interpret(g, env);
  const double loss = out[0].f[0];
  Reference ref{c, env};
  const double refLoss = ref.loss(env["ids"].i, env["targets"].i, B, T);
  EXPECT_NEAR(loss, refLoss, 1e-5 * refLoss);
  EXPECT_GT(loss, 0.5 * std::log(double(c.vocab)));
  EXPECT_LT(loss, 2.0 * std::log(double(c.vocab)));

  // Gradients: at step 1 from zero state, exp_avg = (1 - b1) g. Check a few entries of
  // several parameters against central differences of the double reference.
  Bindings probe = env;
  for (const char* name : {"token_embeddings.weight", "layers.0.attn.q_proj.weight", "layers.1.attn.k_proj.weight",
                           "layers.0.ffn.w2.weight", "layers.1.ln1.weight", "ln_final.weight", "lm_head.weight"}) {
    size_t idx = 0;
    while (models::parameterSpecs(c)[idx].name != name) ++idx;
    const HostTensor& mOut = out[1 + 3 * idx + 1];
    // The entry with the largest gradient, and one more.
    size_t best = 0;
    for (size_t k = 0; k < mOut.size(); ++k)
      if (std::abs(mOut.f[k]) > std::abs(mOut.f[best])) best = k;
    for (size_t k : {best, mOut.size() / 3}) {
      const double gAD = mOut.f[k] / (1 - opt.beta1);
      const double h = 1e-4;
      float& wk = probe[name].f[k];
      const float saved = wk;
      wk = float(double(saved) + h);
      const double up = Reference{c, probe}.loss(env["ids"].i, env["targets"].i, B, T);
      const double hUp = double(wk) - double(saved);
      wk = float(double(saved) - h);
      const double down = Reference{c, probe}.loss(env["ids"].i, env["targets"].i, B, T);
      const double hDown = double(saved) - double(wk);
      wk = saved;
      const double gFD = (up - down) / (hUp + hDown);
      EXPECT_NEAR(gAD, gFD, 1e-4 * std::abs(gFD) + 1e-7) << name << "[" << k << "]";
    }
    // The weight update of step 1: m_hat = g, v_hat = g^2.
    const HostTensor& wOut = out[1 + 3 * idx];
    const HostTensor& vOut = out[1 + 3 * idx + 2];
    for (size_t k = 0; k < wOut.size(); k += 7) {
      const double g1 = mOut.f[k] / (1 - opt.beta1), w0 = env[name].f[k];
      EXPECT_NEAR(vOut.f[k], (1 - opt.beta2) * g1 * g1, 1e-6 * std::abs(vOut.f[k]) + 1e-30);
      const double want = w0 * (1 - opt.lr * opt.weightDecay) - opt.lr * g1 / (std::abs(g1) + opt.eps);
      EXPECT_NEAR(wOut.f[k], want, 1e-6) << name << "[" << k << "]";
    }
  }
}

// ---------------------------------------------------------------------------------------
// AdamW

TEST(FrontendOptim, AdamWMatchesAHandComputedUpdate) {
  struct Case {
    fe::AdamWConfig cfg;
    double step;
  };
  const Case cases[] = {{{0.01, 0.8, 0.95, 1e-6, 0.1}, 3},  // custom hyperparameters
                        {{}, 1},                           // torch defaults (wd 0.01): bias corrections ~1e-3
                        {{}, 1000},
                        {{1e-3, 0.0, 0.5, 1e-8, 0.0}, 2}};  // beta1 = 0: no momentum
  for (const Case& c : cases) {
    const fe::AdamWConfig& cfg = c.cfg;
    const Type t = f32({3, 4});
    Module m;
    Builder b(m.add("opt"));
    Tensor step = fe::input(b, "step", f32({}));
    Tensor p = fe::param(b, "p", t), g = fe::input(b, "g", t), ma = fe::param(b, "m", t), va = fe::param(b, "v", t);
    fe::AdamW adamw(cfg, step);
    auto u = adamw.update(p, g, ma, va);
    b.output(u.param.value());
    b.output(u.expAvg.value());
    b.output(u.expAvgSq.value());
    ASSERT_NO_THROW(verify(m));

    std::mt19937_64 rng(21);
    Bindings env{{"p", randomTensor(t, rng)}, {"g", randomTensor(t, rng)}, {"m", randomTensor(t, rng, -0.1, 0.1)},
                 {"v", randomTensor(t, rng, 0.0, 0.05)}, {"step", tensorOf(f32({}), {float(c.step)})}};
    auto out = interpret(*m.funcs[0], env);
    for (size_t k = 0; k < 12; ++k) {
      double pp = env["p"].f[k], gg = env["g"].f[k], mm = env["m"].f[k], vv = env["v"].f[k];
      pp -= cfg.lr * cfg.weightDecay * pp;
      const double decayed = pp;
      mm = cfg.beta1 * mm + (1 - cfg.beta1) * gg;
      vv = cfg.beta2 * vv + (1 - cfg.beta2) * gg * gg;
      const double mHat = mm / (1 - std::pow(cfg.beta1, c.step)), vHat = vv / (1 - std::pow(cfg.beta2, c.step));
      const double delta = cfg.lr * mHat / (std::sqrt(vHat) + cfg.eps);
      pp -= delta;
      EXPECT_NEAR(out[0].f[k], pp, 1e-6 * std::abs(pp) + 1e-7) << k << " step " << c.step;
      EXPECT_NEAR(decayed - out[0].f[k], delta, 1e-6 * std::abs(delta) + 1e-7 * std::abs(pp)) << k;
      EXPECT_NEAR(out[1].f[k], mm, 1e-6 * std::abs(mm) + 1e-8) << k;
      EXPECT_NEAR(out[2].f[k], vv, 1e-6 * std::abs(vv) + 1e-9) << k;
    }
    // With p = 0 the result is -update alone: check it to f32 relative precision, which the
    // bias corrections only reach when computed without cancellation (1 - 0.999^1 in f32).
    Bindings zeroP = env;
    std::fill(zeroP["p"].f.begin(), zeroP["p"].f.end(), 0.0f);
    auto out0 = interpret(*m.funcs[0], zeroP);
    for (size_t k = 0; k < 12; ++k) {
      double gg = env["g"].f[k], mm = env["m"].f[k], vv = env["v"].f[k];
      mm = cfg.beta1 * mm + (1 - cfg.beta1) * gg;
      vv = cfg.beta2 * vv + (1 - cfg.beta2) * gg * gg;
      const double mHat = mm / (1 - std::pow(cfg.beta1, c.step)), vHat = vv / (1 - std::pow(cfg.beta2, c.step));
      const double delta = cfg.lr * mHat / (std::sqrt(vHat) + cfg.eps);
      EXPECT_NEAR(-out0[0].f[k], delta, 2e-6 * std::abs(delta)) << k << " step " << c.step;
    }
    EXPECT_NE(errorOf([&] { fe::AdamW(cfg, p); }).find("step must be f32[]"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------
// Initialisation

TEST(FrontendInit, StatisticsBoundsAndDeterminism) {
  ModelConfig c = models::namedConfig("tiny");
  c.vocab = 500;
  c.dModel = 128;
  c.heads = 4;
  c.dFF = 256;
  c.layers = 1;
  Bindings a = initParameters(c, 42), a2 = initParameters(c, 42), b = initParameters(c, 43);
  for (const auto& s : models::parameterSpecs(c)) {
    const HostTensor& t = a.at(s.name);
    ASSERT_EQ(t.type, f32(s.shape)) << s.name;
    EXPECT_EQ(t.f, a2.at(s.name).f) << s.name;  // deterministic per seed
    if (s.init == models::Init::Ones) {
      for (float v : t.f) ASSERT_EQ(v, 1.0f);
      continue;
    }
    EXPECT_NE(t.f, b.at(s.name).f) << s.name;  // different per seed
    const double sigma = s.init == models::Init::Embedding ? 1.0 : std::sqrt(2.0 / double(s.shape[0] + s.shape[1]));
    double sum = 0, sq = 0;
    for (float v : t.f) {
      ASSERT_LE(std::abs(double(v)), 3 * sigma * (1 + 1e-6)) << s.name;
      sum += v;
      sq += double(v) * v;
    }
    const double n = double(t.size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(sd, sigma, 0.05 * sigma) << s.name;
    EXPECT_NEAR(mean, 0, 5 * sigma / std::sqrt(n)) << s.name;
  }
  // Two linear layers of one shape draw different values.
  EXPECT_NE(a.at("layers.0.attn.q_proj.weight").f, a.at("layers.0.attn.k_proj.weight").f);
  Bindings st = initAdamState(c);
  EXPECT_EQ(st.size(), 2 * models::parameterSpecs(c).size());
  for (auto& [k, v] : st)
    for (float x : v.f) ASSERT_EQ(x, 0.0f) << k;
  EXPECT_TRUE(st.count("lm_head.weight.exp_avg_sq"));
}

TEST(FrontendInit, NormalSamplerIsStandard) {
  NormalSampler n(7);
  double sum = 0, sq = 0;
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    double z = n.next();
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / N, 0, 0.01);
  EXPECT_NEAR(sq / N, 1, 0.01);
}

}  // namespace
