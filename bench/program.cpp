#include "bench/program.h"

#include "api/compile.h"
#include "runtime/gemm_plan.h"

namespace fusec::bench {

const char* benchProgramName(BenchPass pass) {
  return pass == BenchPass::Forward ? "forward" : pass == BenchPass::FwdBwd ? "fwd_bwd" : "train_step";
}

Graph& buildProgram(Module& m, const api::Model& model, BenchPass pass, DType dtype, int64_t batch,
                    int64_t seq, const models::AdamWConfig& adamw, AttentionLowering attention,
                    std::vector<PassTiming>* passTimings, const DataParallelConfig& dataParallel) {
  if (!m.funcs.empty()) throw Error("internal: buildProgram needs an empty module");
  if (const int64_t ctx = model.contextLength(); ctx > 0 && seq > ctx)
    throw Error("--ctx " + std::to_string(seq) + " exceeds the context length " + std::to_string(ctx) + " of model '" +
                model.name() + "'");
  m.sourceName = "<bench>";
  const char* program = benchProgramName(pass);
  api::CompileOptions o;
  o.dtype = dtype;
  o.adamw = adamw;
  o.attention = attention;
  o.dataParallel = dataParallel;
  Graph& g = model.trace(m, api::Program{program, batch, seq}, o);
  std::vector<PassTiming> timings = api::lowerProgram(m, program, o);
  if (passTimings) *passTimings = std::move(timings);
  return g;
}

int64_t gemmFlops(const Graph& g) {
  int64_t total = 0;
  for (const auto& op : g.ops)
    if (op->kind == OpKind::Matmul) total += rt::planGemm(*op).flops();
  return total;
}

}  // namespace fusec::bench
