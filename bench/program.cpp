#include "bench/program.h"

#include "passes/pass_manager.h"
#include "passes/pipeline.h"
#include "runtime/gemm_plan.h"

namespace fusec::bench {

Graph& buildProgram(Module& m, const models::ModelConfig& cfg, BenchPass pass, DType dtype, int64_t batch,
                    int64_t seq, const models::AdamWConfig& adamw, AttentionLowering attention) {
  if (!m.funcs.empty()) throw Error("internal: buildProgram needs an empty module");
  if (seq > cfg.ctx)
    throw Error("--ctx " + std::to_string(seq) + " exceeds the context length " + std::to_string(cfg.ctx) + " of model '" +
                cfg.name + "'");
  m.sourceName = "<bench>";
  const char* program = pass == BenchPass::Forward ? "forward" : pass == BenchPass::FwdBwd ? "fwd_bwd" : "train_step";
  Graph& g = pass == BenchPass::Forward ? models::buildForward(m, cfg, batch, seq) : models::buildTrainLoss(m, cfg, batch, seq);
  PassManager pm(PassManagerOptions{});
  for (auto& p : programPasses(program, dtype, adamw, attention)) pm.add(std::move(p));
  pm.addPipeline(defaultOptimizationPipeline());
  pm.run(m);
  return g;
}

int64_t gemmFlops(const Graph& g) {
  int64_t total = 0;
  for (const auto& op : g.ops)
    if (op->kind == OpKind::Matmul) total += rt::planGemm(*op).flops();
  return total;
}

}  // namespace fusec::bench
