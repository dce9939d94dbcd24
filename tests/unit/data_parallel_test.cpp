// Data parallelism as IR (passes/data_parallel.h, ir/ops.def's collectives): the interpreter's
// N-rank run of the compiled training step equals the one-rank run with N x the batch; the
// pass buckets gradients in the order the backward makes them; the scheduler places each
// collective as soon as its operands exist and the readers of its results two collectives later;
// the memory plan keeps a collective's operands live until its results are read; collectives
// type-check and fail as they should.
#include <gtest/gtest.h>

#include <set>
#include <unordered_set>

#include <cmath>

#include "api/compiled_program.h"
#include "frontend/init.h"
#include "frontend/models/zoo_model.h"
#include "frontend/program_state.h"
#include "ir/builder.h"
#include "ir/collectives.h"
#include "ir/interpreter.h"
#include "ir/roles.h"
#include "passes/data_parallel.h"
#include "passes/liveness.h"
#include "support/ptr_hash.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::errorOf;

constexpr int64_t T = 8;

HostTensor tokens(int64_t rows, uint64_t seed, int64_t vocab) {
  HostTensor t = HostTensor::zeros(Type{DType::i64, {rows, T}});
  for (size_t k = 0; k < t.i.size(); ++k) t.i[k] = int64_t((seed * 7919 + k * 104729 + k * k) % uint64_t(vocab));
  return t;
}

HostTensor rows(const HostTensor& t, int64_t from, int64_t n) {
  HostTensor out = HostTensor::zeros(Type{t.type.dtype, {n, t.type.shape[1]}});
  std::copy(t.i.begin() + from * t.type.shape[1], t.i.begin() + (from + n) * t.type.shape[1], out.i.begin());
  return out;
}

double relDiff(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    num += (double(a.f[k]) - b.f[k]) * (double(a.f[k]) - b.f[k]);
    den += double(b.f[k]) * b.f[k];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Steps `g` (a lowered train_step) `steps` times on each rank's bindings, updates written back.
std::vector<Bindings> train(const Graph& g, std::vector<Bindings> env, const std::vector<Bindings>& batches, int steps,
                            std::vector<float>& losses) {
  for (int s = 1; s <= steps; ++s) {
    for (size_t r = 0; r < env.size(); ++r) {
      for (auto& [n, t] : batches[r]) env[r][n] = t;
      env[r]["step"] = HostTensor::zeros(Type{DType::f32, {}});
      env[r]["step"].f[0] = float(s);
    }
    std::vector<std::vector<HostTensor>> outs = interpretRanks(g, env);
    losses.push_back(outs[0].at(0).f.at(0));
    for (size_t r = 0; r < env.size(); ++r) {
      EXPECT_EQ(outs[r].at(0).f.at(0), losses.back()) << "rank " << r << " sees another loss";
      for (size_t i = 0; i < outs[r].size(); ++i)
        if (!g.updateOf(i).empty()) env[r][g.updateOf(i)] = outs[r][i];
    }
  }
  return env;
}

// `one` (the whole batch) and `dp` (`ranks` ranks of perRank sequences each) trained 3 steps
// from the same weights on the same sequences: the losses agree to fp32 rounding (1e-5), the
// weights to 1e-4, and every rank holds the same weights. Returns each program's final state.
struct BothRuns {
  std::vector<Bindings> single, job;
};
BothRuns trainAndCompare(const api::Model& model, const models::ModelConfig& cfg, const Graph& one, const Graph& dp,
                         int ranks, int64_t perRank) {
  Bindings w = initParameters(cfg, 3), wJob = initParameters(cfg, 3);
  bindProgramState(one, w);
  bindProgramState(dp, wJob);  // its own moments' shapes (a share of them when sharded)
  const HostTensor ids = tokens(perRank * ranks, 1, cfg.vocab), targets = tokens(perRank * ranks, 2, cfg.vocab);
  std::vector<float> want, got;
  BothRuns out;
  out.single = train(one, {w}, {{{"ids", ids}, {"targets", targets}}}, 3, want);
  std::vector<Bindings> batches;
  for (int r = 0; r < ranks; ++r)
    batches.push_back({{"ids", rows(ids, r * perRank, perRank)}, {"targets", rows(targets, r * perRank, perRank)}});
  out.job = train(dp, std::vector<Bindings>(size_t(ranks), wJob), batches, 3, got);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(got[size_t(s)], want[size_t(s)], 1e-5 * std::abs(want[size_t(s)])) << "step " << s + 1;
  for (const api::ParamInfo& p : model.params()) {
    EXPECT_LT(relDiff(out.job[0].at(p.name), out.single[0].at(p.name)), 1e-4) << p.name;
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(out.job[size_t(r)].at(p.name).f, out.job[0].at(p.name).f) << p.name << " rank " << r;
  }
  return out;
}

class DataParallel : public ::testing::TestWithParam<int> {};

TEST_P(DataParallel, RanksEqualOneRankWithTheirBatchesTogether) {
  const int ranks = GetParam();
  const int64_t perRank = 2;
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.adamw.lr = 1e-2;
  api::CompiledProgram one = api::compile(*model, {"train_step", perRank * ranks, T}, o);
  o.dataParallel.ranks = ranks;
  o.dataParallel.bucketBytes = 4096;  // several buckets even for tiny
  api::CompiledProgram dp = api::compile(*model, {"train_step", perRank, T}, o);

  int collectives = 0;
  for (auto& op : dp.graph().ops) collectives += isCollective(op->kind);
  EXPECT_GT(collectives, 2);  // the loss and several buckets

  trainAndCompare(*model, cfg, one.graph(), dp.graph(), ranks, perRank);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallel, ::testing::Values(2, 4));

// ZeRO-1: each rank holds 1/N of every moment whose weight splits by rows; the weights stay
// whole and equal on every rank, and training equals the unsharded run.
TEST_P(DataParallel, ShardedOptimizerEqualsOneRankAndHoldsAShareOfTheMoments) {
  const int ranks = GetParam();
  const int64_t perRank = 2;
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.adamw.lr = 1e-2;
  api::CompiledProgram one = api::compile(*model, {"train_step", perRank * ranks, T}, o);
  o.dataParallel = DataParallelConfig{ranks, 4096, true};
  api::CompiledProgram dp = api::compile(*model, {"train_step", perRank, T}, o);

  // Moments of a weight whose first dim divides by the ranks are a 1/ranks share (tiny's token
  // embedding, 37 rows, stays whole).
  int64_t wanted = 0, momentsDp = 0;
  for (Op* op : one.graph().params())
    if (roleOf(*op) == Role::ExpAvg || roleOf(*op) == Role::ExpAvgSq) {
      const Type& t = op->result()->type;
      wanted += t.shape[0] % ranks == 0 ? t.numel() / ranks : t.numel();
    }
  for (Op* op : dp.graph().params())
    if (roleOf(*op) == Role::ExpAvg || roleOf(*op) == Role::ExpAvgSq) momentsDp += op->result()->type.numel();
  EXPECT_EQ(momentsDp, wanted);
  EXPECT_LT(dp.stats().residentBytes, one.stats().residentBytes);

  const BothRuns both = trainAndCompare(*model, cfg, one.graph(), dp.graph(), ranks, perRank);
  const std::vector<Bindings>&single = both.single, &job = both.job;
  for (const api::ParamInfo& p : model->params()) {
    // Rank r's moments are rows [r*k, (r+1)*k) of the unsharded run's.
    const HostTensor& m = single[0].at(p.name + ".exp_avg");
    for (int r = 0; r < ranks; ++r) {
      const HostTensor& part = job[size_t(r)].at(p.name + ".exp_avg");
      if (part.size() == m.size()) {  // not sharded: whole on every rank
        EXPECT_LT(relDiff(part, m), 1e-4) << p.name;
        continue;
      }
      ASSERT_EQ(part.size() * size_t(ranks), m.size()) << p.name;
      HostTensor slice = part;
      std::copy(m.f.begin() + std::ptrdiff_t(size_t(r) * part.size()), m.f.begin() + std::ptrdiff_t(size_t(r + 1) * part.size()),
                slice.f.begin());
      EXPECT_LT(relDiff(part, slice), 1e-4) << p.name << " rank " << r;
    }
  }
}

// ZeRO-1 with bf16 compute (passes/shard_master_weights.cpp): each rank holds only its rows of
// the f32 master weights the forward does not read, the ranks gather the bf16 copies instead of
// the f32 weights, and the job computes the same bits as the unsharded bf16 job (the
// interpreter's collectives sum in one order; a cast of gathered rows is a gather of cast rows).
TEST_P(DataParallel, ShardedBf16KeepsARanksRowsOfTheMasterWeightsAndTrainsAsUnsharded) {
  const int ranks = GetParam();
  const int64_t perRank = 2;
  models::ModelConfig cfg = models::namedConfig("tiny");
  cfg.vocab = 40;  // the embedding and lm_head split by rows too
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.adamw.lr = 1e-2;
  o.dtype = DType::bf16;
  o.dataParallel = DataParallelConfig{ranks, 4096, false};
  api::CompiledProgram whole = api::compile(*model, {"train_step", perRank, T}, o);
  o.dataParallel.shardOptimizer = true;
  api::CompiledProgram sharded = api::compile(*model, {"train_step", perRank, T}, o);

  // Which weights hold a rank's rows: those the step reads only through their bf16 copy.
  std::set<std::string> rowsHeld;
  for (Op* p : sharded.graph().params()) {
    if (p->attrInt("ranks") == 1) continue;
    EXPECT_EQ(p->attrInt("ranks"), ranks);
    EXPECT_EQ(roleOf(*p), Role::Weight);
    EXPECT_EQ(p->result()->type.shape[0] * ranks, whole.graph().findParam(p->attrStr("name"))->result()->type.shape[0]);
    rowsHeld.insert(p->attrStr("name"));
  }
  EXPECT_GE(rowsHeld.size(), size_t(4 * cfg.layers));  // each layer's four GEMM weights at least
  EXPECT_TRUE(rowsHeld.count("lm_head.weight"));
  // The copies cross in bf16, a layer's in one all_gather.
  int bf16Copies = 0, bf16Gathers = 0;
  for (auto& op : sharded.graph().ops) {
    if (op->kind != OpKind::AllGather) continue;
    for (auto& r : op->results)
      for (const std::string& w : rowsHeld) EXPECT_NE(r->name, w + ".new") << "the f32 weight is still gathered";
    bf16Gathers += op->operands[0]->type.dtype == DType::bf16;
    for (const Value* x : op->operands) bf16Copies += x->type.dtype == DType::bf16;
  }
  EXPECT_GE(bf16Copies, int(rowsHeld.size()));
  EXPECT_LE(bf16Gathers, int(cfg.layers) + 1);  // the blocks', and lm_head's outside them
  // The norm weights, read whole in f32 and still gathered in f32, join their layer's gather.
  int gathers = 0;
  for (auto& op : sharded.graph().ops) gathers += op->kind == OpKind::AllGather;
  EXPECT_EQ(gathers, int(cfg.layers) + 1);
  EXPECT_LT(sharded.stats().residentBytes, whole.stats().residentBytes);

  Bindings w = initParameters(cfg, 3);
  Bindings wWhole = w;
  bindProgramState(whole.graph(), wWhole);
  std::vector<Bindings> envs;
  for (int r = 0; r < ranks; ++r) {
    Bindings e = w;
    bindProgramState(sharded.graph(), e, r);
    envs.push_back(std::move(e));
  }
  const HostTensor ids = tokens(perRank * ranks, 1, cfg.vocab), targets = tokens(perRank * ranks, 2, cfg.vocab);
  std::vector<Bindings> batches;
  for (int r = 0; r < ranks; ++r)
    batches.push_back({{"ids", rows(ids, r * perRank, perRank)}, {"targets", rows(targets, r * perRank, perRank)}});
  std::vector<float> want, got;
  const std::vector<Bindings> a = train(whole.graph(), std::vector<Bindings>(size_t(ranks), wWhole), batches, 3, want);
  const std::vector<Bindings> b = train(sharded.graph(), envs, batches, 3, got);
  EXPECT_EQ(got, want);
  for (const api::ParamInfo& p : model->params()) {
    const HostTensor& full = a[0].at(p.name);
    if (!rowsHeld.count(p.name)) {
      EXPECT_EQ(b[0].at(p.name).f, full.f) << p.name;
      continue;
    }
    for (int r = 0; r < ranks; ++r) {  // rank r holds rows [r*k, (r+1)*k) of the unsharded weight
      const HostTensor& part = b[size_t(r)].at(p.name);
      ASSERT_EQ(part.size() * size_t(ranks), full.size()) << p.name;
      EXPECT_TRUE(std::equal(part.f.begin(), part.f.end(), full.f.begin() + std::ptrdiff_t(size_t(r) * part.size())))
          << p.name << " rank " << r;
    }
    EXPECT_EQ(b[0].at(p.name + ".bf16").f, a[0].at(p.name + ".bf16").f) << p.name;
  }
  // A rank's rows bound without the rank is refused, not guessed.
  Bindings e = w;
  EXPECT_NE(errorOf([&] { bindProgramState(sharded.graph(), e); }).find("bind it with the rank"), std::string::npos);
}

// frontend/program_state.h: a param of one rank's rows is bound as that rank's block of the
// whole weight (its bf16 copy from the whole weight), and a binding that does not fit is one line.
TEST(DataParallelState, ARanksRowsAreBoundFromTheWholeWeight) {
  Module m;
  Graph& g = m.add("f");
  Builder b(g);
  Value* w = b.param("w", Type{DType::f32, {2, 3}});
  w->def->setAttr("ranks", int64_t(3));
  Value* copy = b.param("w.bf16", Type{DType::bf16, {6, 3}});
  setRole(*copy->def, Role::WeightCopy, "w");
  b.output(w);
  b.output(copy);
  HostTensor whole = HostTensor::zeros(Type{DType::f32, {6, 3}});
  for (size_t k = 0; k < whole.size(); ++k) whole.f[k] = float(k) + 0.25f;
  Bindings env = {{"w", whole}};
  bindProgramState(g, env, 1);
  EXPECT_EQ(env.at("w").type, (Type{DType::f32, {2, 3}}));
  EXPECT_EQ(env.at("w").f, std::vector<float>({6.25f, 7.25f, 8.25f, 9.25f, 10.25f, 11.25f}));  // rows 2 and 3
  EXPECT_EQ(env.at("w.bf16").type, (Type{DType::bf16, {6, 3}}));  // the copy is whole
  EXPECT_EQ(env.at("w.bf16").f[17], 17.25f);
  // Already this rank's rows: left as bound.
  bindProgramState(g, env, 1);
  EXPECT_EQ(env.at("w").f[0], 6.25f);
  Bindings wrong = {{"w", HostTensor::zeros(Type{DType::f32, {5, 3}})}, {"w.bf16", HostTensor::zeros(copy->type)}};
  EXPECT_EQ(errorOf([&] { bindProgramState(g, wrong, 0); }),
            "internal: the program's param 'w' is one rank's rows f32[2,3] of a f32[6,3] weight, bound to f32[5,3]");
  Bindings noRank = {{"w", whole}};
  EXPECT_EQ(errorOf([&] { bindProgramState(g, noRank); }),
            "internal: the program's param 'w' holds one rank's rows of 3; bind it with the rank");
  Bindings pastTheRanks = {{"w", whole}};
  EXPECT_NE(errorOf([&] { bindProgramState(g, pastTheRanks, 3); }).find("bind it with the rank"), std::string::npos);
}

// --grad-reduce-dtype bf16: the gradients cross in bf16 (half the bytes), the optimizer reads
// f32 means; training stays within bf16's rounding of the f32-wire run, sharded or not.
TEST(DataParallelWire, Bf16GradientsStayCloseToTheF32Run) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  for (bool shard : {false, true}) {
    api::CompileOptions o;
    o.adamw.lr = 1e-2;
    o.dataParallel = DataParallelConfig{2, 4096, shard};
    api::CompiledProgram f32 = api::compile(*model, {"train_step", 2, T}, o);
    o.dataParallel.reduceDType = DType::bf16;
    api::CompiledProgram bf16 = api::compile(*model, {"train_step", 2, T}, o);
    int wires = 0;
    for (auto& op : bf16.graph().ops)
      if ((op->kind == OpKind::AllReduce || op->kind == OpKind::ReduceScatter) && op->operands.at(0)->type.rank() > 0) {
        for (const Value* v : op->operands) EXPECT_EQ(v->type.dtype, DType::bf16);
        ++wires;
      }
    EXPECT_GT(wires, 1);
    Bindings w = initParameters(cfg, 3);
    bindProgramState(f32.graph(), w);
    const HostTensor ids = tokens(4, 1, cfg.vocab), targets = tokens(4, 2, cfg.vocab);
    std::vector<Bindings> batches;
    for (int r = 0; r < 2; ++r) batches.push_back({{"ids", rows(ids, r * 2, 2)}, {"targets", rows(targets, r * 2, 2)}});
    std::vector<float> a, b;
    std::vector<Bindings> x = train(f32.graph(), {w, w}, batches, 3, a);
    std::vector<Bindings> y = train(bf16.graph(), {w, w}, batches, 3, b);
    for (int s = 0; s < 3; ++s) EXPECT_NEAR(b[size_t(s)], a[size_t(s)], 1e-2 * std::abs(a[size_t(s)])) << "step " << s + 1;
    for (const api::ParamInfo& p : model->params()) {
      EXPECT_LT(relDiff(y[0].at(p.name), x[0].at(p.name)), 2e-2) << p.name;
      EXPECT_EQ(y[1].at(p.name).f, y[0].at(p.name).f) << p.name;
    }
  }
}

// bf16 compute, f32 wire: the weight-gradient GEMMs write f32 for the collectives themselves
// (matmul out_dtype; no cast of a GEMM's result feeds a collective), and the job still trains
// as one rank with the whole batch does, within bf16's rounding (the job's gradients are the
// GEMMs' f32 accumulators, one rank's are rounded to bf16 first).
TEST(DataParallelWire, Bf16ComputeGemmsWriteTheF32WireThemselves) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.adamw.lr = 1e-2;
  o.dtype = DType::bf16;
  api::CompiledProgram one = api::compile(*model, {"train_step", 4, T}, o);
  o.dataParallel = DataParallelConfig{2, 4096};
  api::CompiledProgram dp = api::compile(*model, {"train_step", 2, T}, o);
  int widened = 0;
  for (auto& op : dp.graph().ops) {
    if (op->kind == OpKind::Matmul && op->attrStr("out_dtype") == "f32") {
      EXPECT_EQ(op->operands[0]->type.dtype, DType::bf16);
      EXPECT_EQ(op->result()->type.dtype, DType::f32);
      ++widened;
    }
    if (!isCollective(op->kind)) continue;
    for (const Value* v : op->operands) {
      const bool castGemm = v->def && v->def->kind == OpKind::Cast && v->def->operands[0]->def &&
                            v->def->operands[0]->def->kind == OpKind::Matmul;
      EXPECT_FALSE(castGemm) << v->name << " is a cast GEMM result";
    }
  }
  // Each layer's q/k/v GEMMs merged, out, w1/w3 merged, w2; and lm_head.
  EXPECT_GE(widened, 4 * int(cfg.layers) + 1);
  Bindings w = initParameters(cfg, 3);
  bindProgramState(one.graph(), w);
  const HostTensor ids = tokens(4, 1, cfg.vocab), targets = tokens(4, 2, cfg.vocab);
  std::vector<float> want, got;
  std::vector<Bindings> x = train(one.graph(), {w}, {{{"ids", ids}, {"targets", targets}}}, 3, want);
  std::vector<Bindings> batches;
  for (int r = 0; r < 2; ++r) batches.push_back({{"ids", rows(ids, r * 2, 2)}, {"targets", rows(targets, r * 2, 2)}});
  std::vector<Bindings> y = train(dp.graph(), {w, w}, batches, 3, got);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(got[size_t(s)], want[size_t(s)], 1e-2 * std::abs(want[size_t(s)])) << "step " << s + 1;
  for (const api::ParamInfo& p : model->params()) {
    EXPECT_LT(relDiff(y[0].at(p.name), x[0].at(p.name)), 2e-2) << p.name;
    EXPECT_EQ(y[1].at(p.name).f, y[0].at(p.name).f) << p.name;
  }
}

TEST(DataParallelSchedule, CollectivesRunEarlyAndTheirReadersTwoCollectivesLater) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.dataParallel.ranks = 2;
  o.dataParallel.bucketBytes = 4096;
  api::CompiledProgram dp = api::compile(*model, {"train_step", 2, T}, o);
  const Graph& g = dp.graph();
  PtrMap<const Op*, size_t> pos;
  std::vector<const Op*> collectives;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    pos[g.ops[k].get()] = k;
    if (isCollective(g.ops[k]->kind)) collectives.push_back(g.ops[k].get());
  }
  ASSERT_GT(collectives.size(), 2u);
  const StorageMap storage(g);
  const Liveness live = computeLiveness(g, storage);
  for (size_t c = 0; c < collectives.size(); ++c) {
    const Op* op = collectives[c];
    // Issued right after the last op that makes its operands (views and constants aside).
    size_t last = 0;
    for (const Value* v : op->operands) last = std::max(last, pos.at(storage.root(v)->def));
    for (size_t k = last + 1; k < pos.at(op); ++k) {
      const Op& between = *g.ops[k];
      EXPECT_TRUE(between.numResults() == 0 || storage.of(between.result()) != Storage::Arena || isCollective(between.kind))
          << "collective " << c << " waits behind " << between.info().name;
    }
    // Its readers come after the second collective after it (passes/schedule.cpp
    // kCollectivesAhead), so its reduction overlaps a bucket's worth of compute.
    if (c + 2 < collectives.size()) {
      for (auto& u : g.ops)
        for (const Value* v : u->operands) {
          if (v->def == op) {
            EXPECT_GT(pos.at(u.get()), pos.at(collectives[c + 2])) << "a reader of collective " << c;
          }
        }
    }
    // In place over a gradient nothing else reads, and that buffer outlives the results' readers.
    for (auto& r : op->results) {
      if (storage.of(r.get()) != Storage::Alias) continue;
      const Value* root = storage.root(r.get());
      EXPECT_EQ(root, inPlaceOperandOf(r.get()));
    }
  }
  for (const Buffer& b : live.buffers)
    for (const Op* op : collectives)
      for (const Value* v : op->operands) {
        if (storage.root(v) != b.value) continue;
        for (auto& u : g.ops)
          for (const Value* x : u->operands) {
            if (x->def == op) {
              EXPECT_GE(b.lastUse, int(pos.at(u.get())));
            }
          }
      }
}

// ZeRO-1's all_gather writes its param in place on the comm stream, which the compute joins only
// at the step's end: the new rows it sends keep their buffer to the end (before, a later kernel
// took those bytes while NCCL still read them, and the GPU job trained to garbage).
TEST(DataParallelSchedule, AllGatherOperandsLiveToTheStepsEnd) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.dataParallel = DataParallelConfig{2, 4096, true};
  api::CompiledProgram dp = api::compile(*model, {"train_step", 2, T}, o);
  const Graph& g = dp.graph();
  const StorageMap storage(g);
  const Liveness live = computeLiveness(g, storage);
  int gathers = 0;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::AllGather) continue;
    ++gathers;
    const Value* root = storage.root(op->operands[0]);
    auto b = std::find_if(live.buffers.begin(), live.buffers.end(), [&](const Buffer& x) { return x.value == root; });
    ASSERT_NE(b, live.buffers.end());
    EXPECT_EQ(b->lastUse, int(g.ops.size())) << op->operands[0]->name;
  }
  EXPECT_GT(gathers, 4);
}

// ZeRO-1's optimizer is as few kernels as the unsharded one's: each layer's new rows and moments
// in one multi-tensor kernel (its all_gathers after it), and in bf16 the gathered weights'
// bf16 copies in one more per layer (they read the all_gathers' results). Before, each param
// had kernels of its own, and bf16 did not compile once they were grouped.
TEST(DataParallelSchedule, ShardedOptimizerKernelsPerLayer) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto adamwKernels = [&](bool shard) {
      api::CompileOptions o;
      o.dtype = dtype;
      o.dataParallel = DataParallelConfig{2, 4096, shard};
      api::CompiledProgram p = api::compile(*model, {"train_step", 2, T}, o);
      int n = 0;
      for (auto& op : p.graph().ops)
        n += op->kind == OpKind::Kernel && op->attrStr("name").find("adamw") != std::string::npos;
      return n;
    };
    const int unsharded = adamwKernels(false), sharded = adamwKernels(true);
    EXPECT_LE(sharded, unsharded + (dtype == DType::bf16 ? int(cfg.layers) + 3 : 0)) << dtypeName(dtype);
  }
}

// ZeRO-1's schedule: the reductions still overlap the backward (a reduce_scatter's readers wait
// for the second reduction after it; before, its all_gathers made that gating a cycle and the
// whole overlap was dropped), and the readers of all_gathered weights (bf16 copies) come last.
TEST(DataParallelSchedule, ShardedReductionsOverlapAndNothingWaitsForAGather) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.dtype = DType::bf16;
  o.dataParallel = DataParallelConfig{2, 4096, true};
  api::CompiledProgram dp = api::compile(*model, {"train_step", 2, T}, o);
  const Graph& g = dp.graph();
  PtrMap<const Op*, size_t> pos;
  std::vector<const Op*> reductions;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    pos[g.ops[k].get()] = k;
    if (communicates(g.ops[k]->kind) && g.ops[k]->kind != OpKind::AllGather) reductions.push_back(g.ops[k].get());
  }
  ASSERT_GT(reductions.size(), 3u);
  auto readers = [&](const Op* c) {
    std::vector<const Op*> out;
    for (auto& u : g.ops)
      for (const Value* v : u->operands)
        if (v->def == c && !communicates(u->kind)) out.push_back(u.get());
    return out;
  };
  for (size_t c = 0; c + 2 < reductions.size(); ++c)
    for (const Op* u : readers(reductions[c])) EXPECT_GT(pos.at(u), pos.at(reductions[c + 2])) << "reduction " << c;
  // With the f32 master weights held as rows (shard-master-weights), every gather writes a
  // param in place (a bf16 copy, or an f32 weight the step reads whole) and no op of the step
  // waits for one. Where an op does read a gathered weight, it goes last
  // (tests/lit/passes/schedule.fir @gathered_readers_last).
  int gathers = 0;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Op* d = g.outputs[i]->def;
    if (d->kind != OpKind::AllGather) continue;
    ++gathers;
    EXPECT_FALSE(g.updateOf(i).empty()) << g.outputs[i]->name;
    EXPECT_TRUE(readers(d).empty()) << g.outputs[i]->name << " is read in the step";
  }
  EXPECT_GT(gathers, 3);
}

TEST(Collectives, TypeRulesAndOneRankInterpreter) {
  Module m;
  Graph& g = m.add("f");
  Builder b(g);
  Value* x = b.input("x", Type{DType::f32, {4, 3}});
  Value* i = b.input("i", Type{DType::i64, {4}});
  EXPECT_EQ(b.create(OpKind::ReduceScatter, {x}, {{"ranks", int64_t(2)}}).at(0)->type, (Type{DType::f32, {2, 3}}));
  EXPECT_EQ(b.create(OpKind::AllGather, {x}, {{"ranks", int64_t(3)}}).at(0)->type, (Type{DType::f32, {12, 3}}));
  EXPECT_EQ(b.create(OpKind::AllReduce, {x, x}, {{"ranks", int64_t(2)}}).size(), 2u);
  g.ops.clear();  // the checks above only typed ops; the program below is one all_reduce
  x = b.input("x", Type{DType::f32, {4, 3}});
  i = b.input("i", Type{DType::i64, {4}});
  EXPECT_EQ(errorOf([&] { b.create(OpKind::ReduceScatter, {x}, {{"ranks", int64_t(3)}}); }),
            "reduce_scatter operand f32[4,3] must have a first dimension divisible by ranks 3");
  EXPECT_EQ(errorOf([&] { b.create(OpKind::AllReduce, {i}, {{"ranks", int64_t(2)}}); }),
            "all_reduce operand must be a float type (f32, bf16, f16), got i64[4]");
  EXPECT_EQ(errorOf([&] { b.create(OpKind::AllReduce, {x}, {{"ranks", int64_t(0)}}); }),
            "all_reduce ranks must be in 1..65536, got 0");
  EXPECT_EQ(errorOf([&] { b.create(OpKind::AllReduce, {x}, {{"ranks", int64_t(2)}, {"reduce", std::string("max")}}); }),
            "all_reduce reduce must be \"sum\" or \"mean\", got \"max\"");
  Value* y = b.create(OpKind::AllReduce, {x}, {{"ranks", int64_t(2)}}).at(0);
  g.addOutput(y);
  HostTensor xv = HostTensor::zeros(Type{DType::f32, {4, 3}});
  for (size_t k = 0; k < xv.size(); ++k) xv.f[k] = float(k) - 5.5f;
  HostTensor iv = HostTensor::zeros(Type{DType::i64, {4}});
  EXPECT_EQ(errorOf([&] { interpret(g, {{"x", xv}, {"i", iv}}); }),
            "all_reduce over 2 ranks needs the other ranks: run the program as a data-parallel job (interpretRanks)");
  HostTensor xw = xv;
  for (float& v : xw.f) v *= 3;
  auto outs = interpretRanks(g, {{{"x", xv}, {"i", iv}}, {{"x", xw}, {"i", iv}}});
  for (size_t k = 0; k < xv.size(); ++k) {
    EXPECT_EQ(outs[0][0].f[k], xv.f[k] * 4);
    EXPECT_EQ(outs[1][0].f[k], xv.f[k] * 4);
  }
  // A rank that fails stops the others (no hang) and its error is the one reported.
  EXPECT_EQ(errorOf([&] { interpretRanks(g, {{{"x", xv}, {"i", iv}}, {{"i", iv}}}); }), "missing value for input 'x'");
  EXPECT_EQ(errorOf([&] { interpretRanks(g, {{{"x", xv}, {"i", iv}}, {{"x", xv}, {"i", iv}}, {{"x", xv}, {"i", iv}}}); }),
            "all_reduce is over 2 ranks, the job has 3");
}

TEST(DataParallelPass, BucketsInTheOrderTheBackwardMakesThem) {
  Module m;
  Graph& g = m.add("f");
  Builder b(g);
  Value* x = b.input("x", Type{DType::f32, {4}});
  Value* w1 = b.param("w1", Type{DType::f32, {4}});
  Value* w2 = b.param("w2", Type{DType::f32, {4}});
  Value* loss = b.reduce(OpKind::Sum, b.binary(OpKind::Mul, b.binary(OpKind::Mul, x, w1), w2), {0});
  // Gradients defined in the order w2 then w1 (as a backward makes them), returned w1, w2.
  Value* g2 = b.binary(OpKind::Mul, x, w1);
  Value* g1 = b.binary(OpKind::Mul, x, w2);
  g.addOutput(loss);
  g.addOutput(g1);
  g.addOutput(g2);
  EXPECT_FALSE(appendGradientReduction(g, DataParallelConfig{1}));
  ASSERT_TRUE(appendGradientReduction(g, DataParallelConfig{2, 16}));  // 16 bytes: one gradient a bucket
  std::vector<const Op*> reductions;
  for (auto& op : g.ops)
    if (op->kind == OpKind::AllReduce) reductions.push_back(op.get());
  ASSERT_EQ(reductions.size(), 3u);  // loss, then w2's gradient (made first), then w1's
  EXPECT_EQ(reductions[0]->operands.at(0), loss);
  EXPECT_EQ(reductions[1]->operands.at(0), g2);
  EXPECT_EQ(reductions[2]->operands.at(0), g1);
  EXPECT_EQ(g.outputs[1]->name, "w1.grad.mean");
  EXPECT_EQ(errorOf([&] { appendGradientReduction(g, DataParallelConfig{2}); }),
            "data-parallel: @f already has collectives");
}

}  // namespace
}  // namespace fusec
