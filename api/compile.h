// The way into fusec as a library: trace a Model's program, lower it through the pipeline,
// and get back a program to bind and step (the XLA Compile -> Executable -> Run shape, or the
// callable torch.compile returns):
//
//   auto model = models::zooModel("small");
//   api::CompiledProgram p = api::compile(*model, {"train_step", 4, 256}, {.dtype = DType::bf16,
//                                                                          .device = api::Device::Cuda});
//   p.bind(weights);                          // params by name (f32 host tensors)
//   auto outs = p.step({{"ids", ids}, {"targets", targets}});   // outs[0]: the loss
//
// lowerProgram is the one place the pipeline is assembled: a traced program's own passes
// (passes/pipeline.h programPasses: decompose, autocast, autodiff, adamw, ...) and then the
// optimisation pipeline (the default, or the --passes list). Everything that compiles a
// program (the CLI commands, bench, profile, the frontend's helpers and the tests) goes
// through it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/adamw_update.h"
#include "passes/pass_manager.h"
#include "passes/pipeline.h"

namespace fusec::rt {
class Communicator;  // runtime/collectives.h
}

namespace fusec::api {

enum class Device { Cpu, Cuda };

struct CompileOptions {
  DType dtype = DType::f32;  // f32, or bf16 (PyTorch autocast's policy)
  AttentionLowering attention = AttentionLowering::Default;
  AdamWConfig adamw;  // train_step only
  // The seed of a training step's dropout masks: step k's key is dropoutKey(seed, k)
  // (ir/step_inputs.h). A data-parallel rank's differs from the others' (tools/fusec/cmd_run).
  uint64_t dropoutSeed = 0;
  bool dropout = true;  // false: the training programs drop dropout too (the model as in eval mode)
  // train_step and fwd_bwd as one rank of a data-parallel job: its gradients and loss are
  // the means over the ranks (passes/data_parallel.h). ranks 1: a single GPU.
  DataParallelConfig dataParallel;
  // Device::Cuda with dataParallel.ranks above 1: this process's membership of the job (it
  // must outlive the program; tools/fusec/job.h makes it).
  rt::Communicator* communicator = nullptr;
  // The passes after the program's own: nullopt runs the default optimisation pipeline, ""
  // none (the program as traced and differentiated), else a comma-separated list.
  std::optional<std::string> passes;
  // false: skip the program passes (the module's program passes already ran: a test that
  // interprets the unoptimised program, then optimises the same module for the GPU).
  bool programPasses = true;
  // Observability and checking of every pass: print-IR, dump dir, timings, verify-each.
  PassManagerOptions passManager;
  // Where compile()'s program runs. Cuda: the kernels are compiled (NVRTC, through the
  // on-disk cubin cache) and the program is resident on the GPU when compile returns.
  Device device = Device::Cpu;
  bool cudaGraph = true;      // replay a step as one CUDA graph after the first
  bool tf32 = false;          // f32 GEMMs on TF32 tensor cores
  bool gemmAutotune = true;   // time cuBLASLt's candidates at the first step (cached on disk)
  bool syncEachLaunch = false;  // debugging: synchronise and check after every launch (no graph)
};

// A program of a model at one input shape: "forward", "train_step" (or "fwd_bwd", a training
// step without its AdamW update), or what else the model traces (Model::programs()).
struct Program {
  std::string name = "forward";
  int64_t batch = 4;
  int64_t seq = 256;
};

// Runs the program passes of `program` and then the optimisation passes of `o` on `m` (whose
// first function is the traced program). Returns the pass timings. Throws Error for an
// unknown program, dtype or pass.
std::vector<PassTiming> lowerProgram(Module& m, const std::string& program, const CompileOptions& o);

// The attention lowering `o` gets for `program` on o.device (passes/pipeline.h
// resolveAttentionLowering: the one rule).
AttentionLowering effectiveAttention(const std::string& program, const CompileOptions& o);

}  // namespace fusec::api
