#include "bench/sweep.h"

#include <iomanip>
#include <map>
#include <new>
#include <optional>
#include <ostream>
#include <sstream>
#include <tuple>

#include "support/progress.h"

namespace fusec::bench {

DType benchDType(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  throw Error("unknown dtype '" + name + "' (known: fp32, bf16)");
}

std::vector<BenchRow> runSweep(const SweepConfig& cfg, const std::map<std::string, Runner>& runners,
                               std::ostream* progress) {
  for (const auto& impl : cfg.impls)
    if (!runners.count(impl)) throw Error("internal: no runner for impl '" + impl + "'");
  for (const auto& d : cfg.dtypes) benchDType(d);
  const size_t total = cfg.models.size() * cfg.batches.size() * cfg.ctxs.size() * cfg.dtypes.size() *
                       cfg.passes.size() * cfg.warmups.size() * cfg.impls.size();
  std::vector<BenchRow> rows;
  std::optional<Progress> bar;
  if (progress) bar.emplace(*progress, "bench", int64_t(total), Progress::Style::Rows);
  // Per (model, ctx, pass): an imported model's count traces its forward, once.
  std::map<std::tuple<std::string, int64_t, BenchPass>, double> counted;
  auto flops = [&](const BenchModel& m, int64_t ctx, BenchPass pass) {
    auto key = std::make_tuple(m.name(), ctx, pass);
    auto it = counted.find(key);
    if (it == counted.end()) it = counted.emplace(key, m.flopsPerToken(ctx, pass)).first;
    return it->second;
  };
  for (const auto& model : cfg.models)
    for (int64_t batch : cfg.batches)
      for (int64_t ctx : cfg.ctxs) {
        // One copy of the weights and tokens per shape: every row of it starts from them.
        Bindings env;
        std::string setupError;
        try {
          if (ctx > model.contextLength())
            throw Error("--ctx " + std::to_string(ctx) + " exceeds the context length " +
                        std::to_string(model.contextLength()));
          env = benchInputs(*model.model, batch, ctx, cfg.seed);
        } catch (const std::bad_alloc&) {
          setupError = "OOM";
        } catch (const std::exception& e) {
          setupError = e.what();
        }
        for (const auto& dtype : cfg.dtypes)
          for (BenchPass pass : cfg.passes)
            for (int warmup : cfg.warmups)
              for (const auto& impl : cfg.impls) {
                BenchRow r;
                r.model = model.name(), r.ctx = ctx, r.batch = batch, r.dtype = dtype, r.pass = passName(pass);
                r.impl = impl, r.warmup = warmup, r.iters = cfg.iters;
                r.modelFlopsPerToken = flops(model, ctx, pass);
                r.peakTflops = dtype == "bf16" ? cfg.bf16Tflops : cfg.f32Tflops;
                const std::string what = r.model + " ctx=" + std::to_string(ctx) + " batch=" + std::to_string(batch) +
                                         " " + dtype + " " + r.pass + " " + impl + " warmup=" + std::to_string(warmup);
                if (bar) bar->begin(what);
                if (!setupError.empty()) {
                  r.status = statusFromError(setupError);
                } else {
                  BenchCase c{model, batch, ctx, benchDType(dtype), pass, warmup, cfg.iters, cfg.adamw};
                  try {
                    TimedRun t = runners.at(impl)(c, env);
                    r.ms = summarize(t.ms);
                    r.allocatedBytes = t.allocatedBytes, r.reservedBytes = t.reservedBytes;
                    r.arenaBytes = t.arenaBytes, r.residentBytes = t.residentBytes;
                  } catch (const std::bad_alloc&) {
                    r.status = "OOM";
                  } catch (const std::exception& e) {
                    r.status = statusFromError(e.what());
                  }
                }
                if (bar) {
                  std::ostringstream result;
                  if (r.ok()) result << "median " << std::fixed << std::setprecision(3) << r.ms->median << " ms";
                  else result << r.status;
                  bar->step(what + ": " + result.str());
                }
                rows.push_back(std::move(r));
              }
      }
  fillSpeedups(rows);
  return rows;
}

}  // namespace fusec::bench
