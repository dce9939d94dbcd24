#include "bench/compiled_runner.h"

#include "bench/program.h"
#include "bench/timer.h"
#include "ir/step_inputs.h"
#include "frontend/program_state.h"
#include "runtime/executable.h"

namespace fusec::bench {

TimedRun runCompiled(const BenchCase& c, Bindings& env, const codegen::CubinCache* cache) {
  Module m;
  Graph& g = buildProgram(m, *c.model.model, c.pass, c.dtype, c.batch, c.seq, c.adamw,
                          resolveAttentionLowering(benchProgramName(c.pass), c.attention, true));
  bindProgramState(g, env);
  rt::ExecutableOptions opts;
  opts.cache = cache;
  rt::Executable exe(g, opts);
  exe.bind(env);
  // The step's in-place updates change the weights from one call to the next, as in
  // training; the timing does not depend on their values.
  int64_t step = 0;
  auto nextStep = [&] { exe.bind(stepInputs(g, ++step, 0)); };
  TimedRun r;
  r.ms = timeOnStream([&] { exe.run(); }, exe.stream(), c.warmup, c.iters, nextStep);
  exe.synchronize();
  r.arenaBytes = int64_t(exe.arenaBytes());
  r.residentBytes = int64_t(exe.residentBytes());
  return r;
}

}  // namespace fusec::bench
