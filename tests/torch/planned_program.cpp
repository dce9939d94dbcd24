#include "planned_program.h"

#include "api/compile.h"
#include "frontend/models/zoo_model.h"

namespace fusec::test {

std::unique_ptr<Module> planProgram(const models::ModelConfig& cfg, const std::string& program, DType dtype,
                                    int64_t batch, int64_t seq, const models::AdamWConfig& adamw) {
  if (program != "forward" && program != "train_step")
    throw Error("planProgram: program '" + program + "' is neither forward nor train_step");
  // Verifying after every pass costs seconds on the big models and proves nothing new here
  // (the pass tests do that); the runtime rejects a graph it cannot run.
  PassManagerOptions verifyNone;
  verifyNone.verifyEach = false;
  const api::CompileOptions o{.dtype = dtype, .adamw = adamw, .passManager = verifyNone};
  auto m = std::make_unique<Module>();
  models::transformerModel(cfg)->trace(*m, api::Program{program, batch, seq}, o);
  api::lowerProgram(*m, program, o);
  return m;
}

}  // namespace fusec::test
