// Every generated kernel of tiny and small (2 layers), `forward` and `train_step`, fp32 and
// bf16, run on the GPU and compared with the CPU interpreter running the kernel's body on
// the same random non-zero inputs. Results are poisoned (NaN, or 0xff bytes for integers)
// before the launch, so a kernel that skips an element fails. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "codegen/generate.h"
#include "codegen/nvrtc_compiler.h"
#include "frontend/models/transformer.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "runtime/host_storage.h"
#include "runtime/kernel_module.h"
#include "test_util.h"

namespace fusec {
namespace {

using codegen::GeneratedKernel;

// Host <-> device storage: runtime/host_storage.h (a poisoned bool byte reads as 255).
using rt::fromStorage;
using rt::toStorage;

size_t elemBytes(DType d) { return size_t(dtypeBytes(d)); }

// ---- inputs ----

// The exclusive bound of an integer operand: the smallest axis it indexes (gather/scatter)
// through integer-typed body values, else the vocabulary (targets compared with an iota).
int64_t indexBound(const Graph& body, const Value* input, int64_t fallback) {
  std::set<const Value*> derived{input};
  int64_t bound = fallback;
  for (const auto& op : body.ops) {
    bool uses = false;
    for (const Value* v : op->operands) uses |= derived.count(v) > 0;
    if (!uses) continue;
    if ((op->kind == OpKind::Gather || op->kind == OpKind::ScatterAdd) && derived.count(op->operands[1])) {
      const Type& x = op->operands[0]->type;
      int64_t axis = op->attrInt("axis");
      if (axis < 0) axis += x.rank();
      bound = std::min(bound, x.shape[size_t(axis)]);
    }
    for (const auto& r : op->results)
      if (!isFloat(r->type.dtype)) derived.insert(r.get());
  }
  return bound;
}

// What an input must be for the body to stay finite on it.
enum class Domain { Any, Step, Positive };

// Body values that reach the argument of log, sqrt, rsqrt or pow's base (saved RMSNorm
// statistics, AdamW's second moments): every input they are computed from is made
// positive. Conservative (a difference of positives is not positive), which the finiteness
// check on the interpreter's results would reveal.
std::set<const Value*> mustBePositive(const Graph& body) {
  std::set<const Value*> s;
  for (auto it = body.ops.rbegin(); it != body.ops.rend(); ++it) {
    const Op& op = **it;
    if (op.kind == OpKind::Log || op.kind == OpKind::Sqrt || op.kind == OpKind::Rsqrt || op.kind == OpKind::Pow)
      s.insert(op.operands[0]);
    bool feeds = false;
    for (const auto& r : op.results) feeds |= s.count(r.get()) > 0;
    if (feeds)
      for (const Value* v : op.operands)
        if (isFloat(v->type.dtype)) s.insert(v);
  }
  return s;
}

Domain domainOf(const Value* operand, const Value* bodyInput, const std::set<const Value*>& positive) {
  // AdamW's step counts from 1 (bias corrections divide by 1 - beta^step).
  if (operand->def->kind == OpKind::Input && operand->def->attrStr("name") == "step") return Domain::Step;
  return positive.count(bodyInput) ? Domain::Positive : Domain::Any;
}

HostTensor randomInput(const Type& t, Domain domain, int64_t indexLimit, std::mt19937& rng) {
  if (t.dtype == DType::boolean) return test::randomIndex(t, rng, 0, 2);
  if (!isFloat(t.dtype)) return test::randomIndex(t, rng, 0, indexLimit);
  HostTensor h = HostTensor::zeros(t);
  std::uniform_real_distribution<float> mag(0.25f, 1.0f);
  std::uniform_int_distribution<int> step(1, 10), sign(0, 1);
  for (size_t k = 0; k < h.size(); ++k) {
    double v = domain == Domain::Step ? step(rng) : mag(rng);
    if (domain == Domain::Any && sign(rng)) v = -v;
    h.set(k, v);
  }
  return h;
}

// ---- comparison ----

bool producesLowPrecision(const Graph& body) {
  for (const auto& op : body.ops)
    for (const auto& r : op->results)
      if (r->type.dtype == DType::bf16 || r->type.dtype == DType::f16) return true;
  return false;
}

struct Worst {
  int kernels = 0;
  double error = 0;
  std::string kernel;
};
// (family, program dtype) -> the worst error over every result of every kernel run.
std::map<std::string, Worst>& summary() {
  static std::map<std::string, Worst> s;
  return s;
}

struct Summary : ::testing::Environment {
  void TearDown() override {
    if (summary().empty()) return;
    std::printf("generated kernels vs interpreter (norm-wise relative error, worst per family):\n");
    for (auto& [key, w] : summary())
      std::printf("  %-22s %4d kernels  worst %.3g (%s)\n", key.c_str(), w.kernels, w.error, w.kernel.c_str());
  }
};
[[maybe_unused]] auto* const kSummary = ::testing::AddGlobalTestEnvironment(new Summary);

// ---- the test ----

struct Case {
  std::string model, program;
  DType dtype;
  int64_t layers, batch, ctx;
  // Every pointer offset by this many elements from its allocation: 1 makes each one
  // misaligned for 16-byte vectors, so the kernels must take their scalar paths.
  int64_t misalign = 0;
};

std::string caseName(const ::testing::TestParamInfo<Case>& i) {
  return i.param.model + "_" + i.param.program + "_" + std::string(dtypeName(i.param.dtype)) + "_ctx" +
         std::to_string(i.param.ctx) + (i.param.misalign ? "_misaligned" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.program << " " << dtypeName(c.dtype) << " ctx " << c.ctx << (c.misalign ? " misaligned" : "");
}

class KernelRun : public ::testing::TestWithParam<Case> {};

TEST_P(KernelRun, EveryKernelMatchesTheInterpreter) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!codegen::nvrtcAvailable()) GTEST_SKIP() << "fusec was built without NVRTC";
  rt::openDevice();
  const Case& c = GetParam();
  models::ModelConfig cfg = models::namedConfig(c.model);
  cfg.layers = c.layers;
  Module m;
  if (c.program == "forward") models::buildForward(m, cfg, c.batch, c.ctx);
  else models::buildTrainLoss(m, cfg, c.batch, c.ctx);
  api::lowerProgram(m, c.program, {.dtype = c.dtype});

  std::vector<GeneratedKernel> kernels = codegen::generateModule(m);
  codegen::CubinCache cache(codegen::CubinCache::defaultDir());
  rt::KernelModule module(kernels, rt::compileImages(kernels, &cache));

  std::mt19937 rng(1234);
  size_t next = 0;  // generateModule lists the kernel ops in this same order
  for (const auto& g : m.funcs)
    for (const auto& op : g->ops) {
      if (op->kind != OpKind::Kernel) continue;
      ASSERT_LT(next, kernels.size());
      const GeneratedKernel& k = kernels[next++];
      const Graph& body = *op->body;
      SCOPED_TRACE(k.name);

      // Inputs: bound to the body by the names of its input ops, in operand order.
      Bindings env;
      std::vector<HostTensor> operands;
      std::vector<const Op*> bodyInputs;
      for (const auto& bop : body.ops)
        if (bop->kind == OpKind::Input) bodyInputs.push_back(bop.get());
      ASSERT_EQ(bodyInputs.size(), op->operands.size());
      const std::set<const Value*> positive = mustBePositive(body);
      for (size_t i = 0; i < op->operands.size(); ++i) {
        const Value* v = op->operands[i];
        operands.push_back(randomInput(v->type, domainOf(v, bodyInputs[i]->result(), positive), indexBound(body, bodyInputs[i]->result(), cfg.vocab), rng));
        env[bodyInputs[i]->attrStr("name")] = operands.back();
      }
      std::vector<HostTensor> want = interpret(body, env);
      ASSERT_EQ(want.size(), k.results.size());
      for (const auto& w : want)
        for (float x : w.f) ASSERT_TRUE(std::isfinite(x)) << "the interpreter gives a non-finite value: inputs out of domain";

      // Device buffers: operands hold their data; results are poisoned, except a result
      // aliased to an operand, which shares that operand's buffer (in-place update).
      std::vector<rt::DeviceBuffer> buffers;
      std::vector<void*> pointers;
      auto shifted = [&](const Type& t) {
        return static_cast<uint8_t*>(buffers.back().data()) + c.misalign * int64_t(elemBytes(t.dtype));
      };
      auto slack = [&](const Type& t) { return size_t(c.misalign) * elemBytes(t.dtype); };
      for (const HostTensor& h : operands) {
        std::vector<uint8_t> bytes = toStorage(h);
        buffers.emplace_back(std::max<size_t>(bytes.size(), 1) + slack(h.type), "kernel operand");
        FUSEC_CUDA(cudaMemcpy(shifted(h.type), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), k.name);
        pointers.push_back(shifted(h.type));
      }
      for (size_t r = 0; r < k.results.size(); ++r) {
        auto alias = std::find_if(k.aliases.begin(), k.aliases.end(), [&](auto& a) { return a.second == int(r); });
        if (alias != k.aliases.end()) {
          pointers.push_back(pointers[size_t(alias->first)]);
          continue;
        }
        const Type& t = k.results[r];
        const size_t bytes = size_t(t.numel()) * elemBytes(t.dtype);
        buffers.emplace_back(std::max<size_t>(bytes, 1) + slack(t), "kernel result");
        // 0xff bytes: NaN in every float dtype, -1 or 255 for integers.
        FUSEC_CUDA(cudaMemset(shifted(t), 0xff, bytes), k.name);
        pointers.push_back(shifted(t));
      }
      auto resultBytes = [&](size_t r) {
        const Type& t = k.results[r];
        std::vector<uint8_t> bytes(size_t(t.numel()) * elemBytes(t.dtype));
        FUSEC_CUDA(cudaMemcpy(bytes.data(), pointers[operands.size() + r], bytes.size(), cudaMemcpyDeviceToHost), k.name);
        return bytes;
      };
      module.launch(k.name, pointers);
      FUSEC_CUDA(cudaDeviceSynchronize(), "running " + k.name);
      if (k.family == KernelFamily::Scatter && k.aliases.empty()) {
        // Deterministic: a second run on re-poisoned results gives the same bits.
        std::vector<std::vector<uint8_t>> first;
        for (size_t r = 0; r < k.results.size(); ++r) first.push_back(resultBytes(r));
        for (size_t r = 0; r < k.results.size(); ++r)
          FUSEC_CUDA(cudaMemset(pointers[operands.size() + r], 0xff, first[r].size()), k.name);
        module.launch(k.name, pointers);
        FUSEC_CUDA(cudaDeviceSynchronize(), "running " + k.name);
        for (size_t r = 0; r < k.results.size(); ++r)
          EXPECT_TRUE(resultBytes(r) == first[r]) << k.name << " result " << r << " differs between two runs";
      }

      const bool low = producesLowPrecision(body);
      const std::string key = std::string(familyName(k.family)) + " " + std::string(dtypeName(c.dtype));
      Worst& worst = summary()[key];
      ++worst.kernels;
      for (size_t r = 0; r < k.results.size(); ++r) {
        const Type& t = k.results[r];
        HostTensor got = fromStorage(t, resultBytes(r));
        double err = test::normRelError(got, want[r]);
        if (std::isnan(err)) err = INFINITY;
        const double tol = !isFloat(t.dtype) ? 0.0 : low ? 1e-2 : 1e-5;
        EXPECT_LE(err, tol) << k.name << " result " << r << " (" << t.str() << ", " << familyName(k.family) << ")";
        if (err >= worst.error) worst.error = err, worst.kernel = k.name;
      }
    }
  EXPECT_EQ(next, kernels.size());
}

// A failing launch names the function; a wrong pointer count is caught before any launch.
TEST(KernelModule, LaunchErrorsNameTheKernel) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!codegen::nvrtcAvailable()) GTEST_SKIP() << "fusec was built without NVRTC";
  rt::openDevice();
  Module m;
  models::buildForward(m, models::namedConfig("tiny"), 1, 4);
  api::lowerProgram(m, "forward", {.dtype = DType::f32});
  std::vector<GeneratedKernel> kernels = codegen::generateModule(m);
  ASSERT_FALSE(kernels.empty());
  GeneratedKernel& k = kernels.front();
  k.launches.front().block = {2048, 1, 1};  // over the 1024 threads a block may have
  codegen::CubinCache cache(codegen::CubinCache::defaultDir());
  rt::KernelModule module(kernels, rt::compileImages(kernels, &cache));
  std::vector<rt::DeviceBuffer> buffers;
  std::vector<void*> pointers;
  buffers.reserve(k.operands.size() + k.results.size());
  auto alloc = [&](const Type& t) {
    buffers.emplace_back(size_t(t.numel()) * elemBytes(t.dtype), "kernel parameter");
    pointers.push_back(buffers.back().data());
  };
  for (const auto& t : k.operands) alloc(t);
  for (const auto& t : k.results) alloc(t);
  // The message after the colon is cudart's ("invalid argument" past __launch_bounds__).
  const std::string err = test::errorOf([&] { module.launch(k.name, pointers); });
  EXPECT_EQ(err.rfind("CUDA launch of " + k.launches.front().function + " failed: ", 0), 0u) << err;
  pointers.pop_back();
  EXPECT_EQ(test::errorOf([&] { module.launch(k.name, pointers); }).rfind("kernel " + k.name + " takes ", 0), 0u);
  EXPECT_EQ(test::errorOf([&] { module.launch("no_such_kernel", pointers); }), "no loaded kernel 'no_such_kernel'");
}

INSTANTIATE_TEST_SUITE_P(Models, KernelRun,
                         ::testing::Values(Case{"tiny", "forward", DType::f32, 2, 2, 13},
                                           Case{"tiny", "train_step", DType::f32, 2, 2, 13},
                                           Case{"tiny", "forward", DType::bf16, 2, 2, 13},
                                           Case{"tiny", "train_step", DType::bf16, 2, 2, 13},
                                           Case{"small", "forward", DType::f32, 2, 2, 64},
                                           Case{"small", "train_step", DType::f32, 2, 2, 64},
                                           Case{"small", "forward", DType::bf16, 2, 2, 64},
                                           Case{"small", "train_step", DType::bf16, 2, 2, 64},
                                           // Sizes the vector widths divide (rows of 16), then
                                           // every pointer misaligned: the scalar paths.
                                           Case{"tiny", "train_step", DType::f32, 2, 2, 16},
                                           Case{"tiny", "train_step", DType::bf16, 2, 2, 16},
                                           Case{"tiny", "train_step", DType::f32, 2, 2, 16, 1},
                                           Case{"tiny", "train_step", DType::bf16, 2, 2, 16, 1},
                                           Case{"small", "train_step", DType::bf16, 2, 2, 64, 1}),
                         caseName);

}  // namespace
}  // namespace fusec
