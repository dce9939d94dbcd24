// The compile API as a C++ user calls it: take a model, compile its training step, bind
// weights, and step. Trains the zoo's `tiny` transformer on a fixed random batch for a few
// steps and prints the loss of each (it falls: the step overfits one batch).
//
//   build/examples/fusec_train_tiny [steps] [cpu|cuda]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "api/compiled_program.h"
#include "frontend/init.h"
#include "frontend/models/zoo_model.h"
#include "frontend/program_state.h"

using namespace fusec;

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const bool cuda = argc > 2 && std::string(argv[2]) == "cuda";
  if (steps < 1) throw Error("steps must be at least 1");

  // 1. A model and the program to compile: tiny's training step at batch 2, 16 tokens.
  const models::ModelConfig cfg = models::namedConfig("tiny");
  std::unique_ptr<api::Model> model = models::transformerModel(cfg);
  const api::Program program{"train_step", 2, 16};
  api::CompileOptions options;
  options.adamw.lr = 1e-2;
  options.device = cuda ? api::Device::Cuda : api::Device::Cpu;

  // 2. Compile: trace, program passes (autodiff, AdamW), optimisation pipeline; on cuda the
  //    kernels are compiled and the program is resident on the GPU.
  api::CompiledProgram step = api::compile(*model, program, options);
  const api::ProgramStats stats = step.stats();
  std::printf("compiled %s:%s: %lld launches (%lld GEMMs), arena %lld bytes, passes %.1f ms\n", model->name().c_str(),
              program.name.c_str(), (long long)stats.launches.launches(), (long long)stats.launches.gemms,
              (long long)stats.arenaBytes, stats.passMs);

  // 3. Weights: initialised as the PyTorch model would be, plus the AdamW moments (zeros).
  Bindings weights = initParameters(cfg, /*seed=*/1);
  bindProgramState(step.graph(), weights);
  step.bind(std::move(weights));

  // 4. One batch of token ids and next-token targets.
  std::mt19937_64 rng(7);
  HostTensor ids = HostTensor::zeros(Type{DType::i64, {program.batch, program.seq}});
  for (auto& t : ids.i) t = int64_t(rng() % uint64_t(cfg.vocab));
  HostTensor targets = ids;
  for (int64_t b = 0; b < program.batch; ++b)
    for (int64_t t = 0; t < program.seq; ++t)
      targets.i[size_t(b * program.seq + t)] = ids.i[size_t(b * program.seq + (t + 1) % program.seq)];

  // 5. Step: each call runs forward, backward and the AdamW update; outputs[0] is the loss.
  for (int s = 1; s <= steps; ++s) {
    std::vector<HostTensor> outs = step.step({{"ids", ids}, {"targets", targets}});
    std::printf("step %d loss %.4f\n", s, outs.at(0).f.at(0));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
