// The LibTorch eager reference: the CS336 BasicsTransformerLM written with plain torch tensors
// and autograd, loading the same weights as fusec (a Bindings map by state_dict name). It is
// the oracle for fusec's programs (forward, gradients, AdamW steps) and the eager baseline of
// the benchmarks. This header deliberately includes no torch header: LibTorch stays inside
// bench/eager_model.cpp, and callers see only fusec types.
#pragma once
#include <memory>
#include <string>

#include "frontend/models/transformer.h"
#include "frontend/optim.h"
#include "ir/host_tensor.h"

namespace fusec::bench {

struct EagerOptions {
  std::string device = "cpu";  // any torch device string: "cpu", "cuda", "cuda:1"
  // f32, or bf16: forward and loss under LibTorch's CUDA autocast (bf16), as a PyTorch user
  // trains in mixed precision; parameters, gradients and AdamW state stay f32. bf16 needs a
  // CUDA device (CPU autocast has another op policy than the one fusec's autocast follows).
  DType dtype = DType::f32;
};

// True when LibTorch sees a CUDA device; otherwise `why` (if given) says why not.
bool torchCudaAvailable(std::string* why = nullptr);

class EagerModel {
 public:
  // `weights` must hold every parameter of `cfg` (f32, exact shapes); throws Error otherwise,
  // and for a dtype other than f32 and bf16 or bf16 on a non-CUDA device. Destruction hands
  // the CUDA memory it used back to the driver (LibTorch's caching allocator would keep it),
  // so a program that runs next on the same GPU finds it free.
  EagerModel(const models::ModelConfig& cfg, const Bindings& weights, const EagerOptions& opts = {});
  ~EagerModel();
  EagerModel(const EagerModel&) = delete;
  EagerModel& operator=(const EagerModel&) = delete;

  // logits [B,T,V] for ids i64[B,T], as f32 values (under bf16 the logits are bf16 values).
  HostTensor forward(const HostTensor& ids);

  // The mean cross-entropy loss and d(loss)/d(param) for every parameter, by name; the
  // weights are left unchanged.
  struct LossAndGrads {
    float loss = 0;
    Bindings grads;
  };
  LossAndGrads lossAndGradients(const HostTensor& ids, const HostTensor& targets);

  // One torch::optim::AdamW step (state kept across calls; the first call fixes the config);
  // returns the loss computed before the update.
  float trainStep(const HostTensor& ids, const HostTensor& targets, const models::AdamWConfig& adamw);

  // Benchmark entry points (bench/eager_runner.*): the work of forward, lossAndGradients
  // and trainStep on tokens uploaded once by stageTokens(), with every result left on the
  // device and no host synchronisation (no .item(), no copies), so CUDA events around a call
  // time the model alone. lossAndGradientsStaged() leaves each parameter's .grad set.
  void stageTokens(const HostTensor& ids, const HostTensor& targets);
  void forwardStaged();
  void lossAndGradientsStaged();
  void trainStepStaged(const models::AdamWConfig& adamw);

  // The current parameters, by state_dict name.
  Bindings parameters() const;

  const models::ModelConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusec::bench
