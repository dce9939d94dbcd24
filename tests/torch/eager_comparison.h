// The compiled program against the LibTorch eager model, same weights (initParameters with a
// fixed seed), same tokens: forward logits, then `steps` training steps (AdamW state carried)
// with each step's loss and every parameter afterwards. Eager runs first and its results are
// kept on the host; the model is freed (its device memory handed back) before the compiled
// programs are built, so that the largest size's two copies of the training state never
// share the GPU. Errors are norm-wise relative, ||compiled - eager|| / ||eager||.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontend/models/transformer.h"
#include "planned_program.h"

namespace fusec::test {

struct ComparisonCase {
  models::ModelConfig cfg;
  DType dtype = DType::f32;
  int64_t batch = 4, seq = 256;
  int steps = 3;
  uint64_t seed = 1234;              // weights; the tokens are drawn from seed + 1, seed + 2, ...
  std::string eagerDevice = "cuda";  // EagerOptions::device
  models::AdamWConfig adamw;
  std::string label() const;         // "small fp32"
};

// Builds the backend that runs a planned program (the interpreter, the GPU Executable).
using RunnerFactory = std::function<std::unique_ptr<ProgramRunner>(const Graph&)>;

struct ParamError {
  std::string name;
  double weights = 0;  // the parameter after the last step
  double update = 0;   // its change over the steps (after - initial): far stricter, printed only
};

// Wall seconds of each stage (init weights, eager, compiled forward, ...), in order.
using ComparisonTimes = std::vector<std::pair<std::string, double>>;

struct ComparisonResult {
  double logits = 0;
  std::vector<float> eagerLosses, compiledLosses;
  std::vector<double> lossErrors;  // |compiled - eager| / |eager|, per step
  std::vector<ParamError> params;  // parameterSpecs order
  ComparisonTimes seconds;
};

ComparisonResult compareWithEager(const ComparisonCase& c, const RunnerFactory& runner);

// The data of a loss curve, fixed by the case's seed and the same for both implementations.
enum class CurveData {
  OneBatchRepeated,  // one uniform random batch every step: the model memorises it
  UniformStream,     // a fresh uniform random batch every step: nothing to learn but the
                     // unigram distribution, so training stays stable (no memorisation phase)
};

// `c.steps` training steps on `data`: the loss of each step, eager and compiled, and, when a
// second backend is given, compiled again on it (`reordered`: the same program with other f32
// summation orders, which measures how far two valid f32 runs of this curve drift apart).
struct LossCurves {
  std::vector<float> eager, compiled, reordered;
  ComparisonTimes seconds;
  double maxAbsDiff() const;           // compiled against eager
  double maxReorderedDiff() const;     // compiled against reordered (0 without it)
};
LossCurves lossCurves(const ComparisonCase& c, const RunnerFactory& runner, CurveData data,
                      const RunnerFactory& reorderedRunner = nullptr);

// ||got - want|| / ||want|| over the values (either may be bf16); the absolute norm when want
// is zero. Throws Error naming `what` when the shapes differ.
double normRelError(const HostTensor& got, const HostTensor& want, const std::string& what);

// The CS336 init of every parameter (frontend/init.h), the tensors drawn on several threads:
// each has its own generator, so the values are those of initParameters.
Bindings initWeights(const models::ModelConfig& cfg, uint64_t seed);

// One line per quantity, prefixed with the case's label: logits, each step's loss, the worst
// parameter (and update) error per parameter kind (the name without its layer index).
void printComparison(const ComparisonCase& c, const ComparisonResult& r);
// "[label] seconds: init weights 1.23; eager 4.56; ..."
void printTimes(const std::string& label, const ComparisonTimes& times);

}  // namespace fusec::test
