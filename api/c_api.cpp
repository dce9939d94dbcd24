// The C interface (api/c_api.h) over the parser, lowerProgram and a runner: the rt::Executable
// with caller-owned addresses on the GPU, the interpreter on host memory on the CPU.
#include "api/c_api.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "api/compile.h"
#include "api/runner.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/fusion/kernel_family.h"
#include "runtime/host_storage.h"
#include "support/atomic_file.h"
#ifdef FUSEC_HAVE_CUDA
#include "codegen/cubin_cache.h"
#include "runtime/executable.h"
#endif

struct fusec_program {
  std::unique_ptr<fusec::Module> module;
  const fusec::Graph* graph = nullptr;
  bool cuda = false;
  std::vector<const fusec::Value*> sources;  // inputs and params, in program order
  std::vector<std::string> sourceNames, sourceTypes, outputTypes;
  std::vector<ptrdiff_t> outputAlias;  // per output: the first earlier output of the same value, or -1
  size_t launches = 0;
  int64_t calls = 0, copiedIn = 0, copiedOut = 0;
  std::string stats;  // fusec_stats' line
#ifdef FUSEC_HAVE_CUDA
  std::unique_ptr<fusec::codegen::CubinCache> cache;
  std::unique_ptr<fusec::rt::Executable> exe;
  // The addresses of the last call, and whether each is used in place (else copied).
  std::vector<const void*> lastSource;
  std::vector<void*> lastOutput;
  std::vector<bool> sourceInPlace, outputInPlace;
  std::vector<int> sourceMoves, outputMoves;      // address changes seen, per buffer
  std::vector<bool> sourceCopied, outputCopied;   // moved too often: copied from now on
  int copyAfterMoves = 3;
  bool zeroCopyInputs = true, zeroCopyOutputs = true;  // false: copied (debugging)
  bool sync = false;  // each call waits for its kernels (debugging)
#endif
};

namespace {

using namespace fusec;

void report(const std::string& message, char* error, size_t size) {
  if (!error || size == 0) return;
  std::string line = message.substr(0, message.find('\n'));
  const size_t n = std::min(line.size(), size - 1);
  std::memcpy(error, line.data(), n);
  error[n] = '\0';
}

struct Options {
  std::string passes = "decompose-keep-attention," + defaultOptimizationPipeline(true);
  bool cudaGraph = true;
  bool zeroCopyInputs = true, zeroCopyOutputs = true;
  bool sync = false;
  int copyAfterMoves = 3;
  std::string dump;
};

Options parseOptions(const char* text) {
  Options o;
  std::string s = text ? text : "";
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(',', at);
    // passes= takes the rest: a pipeline is itself comma-separated.
    std::string item = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("option '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq);
    if (key == "passes") {
      o.passes = s.substr(at + eq + 1);
      break;
    }
    const std::string value = item.substr(eq + 1);
    if (key == "cuda_graph" && (value == "0" || value == "1")) o.cudaGraph = value == "1";
    else if (key == "zero_copy" && (value == "0" || value == "1" || value == "inputs" || value == "outputs")) {
      o.zeroCopyInputs = value == "1" || value == "inputs";
      o.zeroCopyOutputs = value == "1" || value == "outputs";
    }
    else if (key == "dump") o.dump = value;
    else if (key == "sync" && (value == "0" || value == "1")) o.sync = value == "1";
    else if (key == "copy_after_moves" && !value.empty() && value.size() < 6 &&
             value.find_first_not_of("0123456789") == std::string::npos)
      o.copyAfterMoves = std::stoi(value);
    else throw Error("unknown option '" + item + "' (known: passes=, cuda_graph=0|1, zero_copy=0|1|inputs|outputs, copy_after_moves=N, sync=0|1, dump=)");
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return o;
}

void compileInto(fusec_program& p, const char* text, const std::string& device, const Options& o) {
  if (device != "cuda" && device != "cpu") throw Error("unknown device '" + device + "' (cuda or cpu)");
  p.cuda = device == "cuda";
  p.module = parseModule(text, "<fusec_compile>");
  if (p.module->funcs.empty()) throw Error("the module has no function");
  verify(*p.module);
  checkKernelRecords(*p.module);
  api::CompileOptions co;
  co.programPasses = false;
  co.passes = o.passes;
  co.device = p.cuda ? api::Device::Cuda : api::Device::Cpu;
  if (p.cuda) api::requireCudaDevice();  // before any pass work
  api::lowerProgram(*p.module, "forward", co);
  if (!o.dump.empty()) writeFileAtomically(o.dump, printModule(*p.module));
  p.graph = p.module->funcs.at(0).get();
  for (const auto& op : p.graph->ops) {
    if (op->kind == OpKind::Input || op->kind == OpKind::Param) {
      p.sources.push_back(op->result());
      p.sourceNames.push_back(op->attrStr("name"));
      p.sourceTypes.push_back(op->result()->type.str());
    }
    if (op->kind == OpKind::Kernel || op->kind == OpKind::Matmul) ++p.launches;
  }
  const auto& outs = p.graph->outputs;
  for (size_t i = 0; i < outs.size(); ++i) {
    p.outputTypes.push_back(outs[i]->type.str());
    const auto first = std::find(outs.begin(), outs.begin() + ptrdiff_t(i), outs[i]);
    p.outputAlias.push_back(first == outs.begin() + ptrdiff_t(i) ? -1 : first - outs.begin());
  }
  for (size_t i = 0; i < p.graph->outputs.size(); ++i)
    if (!p.graph->updateOf(i).empty()) throw Error("output " + std::to_string(i) + " updates a param in place; the C API runs pure functions");
#ifdef FUSEC_HAVE_CUDA
  if (p.cuda) {
    p.cache = std::make_unique<codegen::CubinCache>(codegen::CubinCache::defaultDir());
    rt::ExecutableOptions eo;
    eo.cache = p.cache.get();
    eo.cudaGraph = o.cudaGraph;
    eo.callerBuffers = true;  // sources and outputs are the caller's, read and written where they lie
    p.exe = std::make_unique<rt::Executable>(*p.graph, eo);
    p.zeroCopyInputs = o.zeroCopyInputs;
    p.zeroCopyOutputs = o.zeroCopyOutputs;
    p.sync = o.sync;
    p.lastSource.assign(p.sources.size(), nullptr);
    p.lastOutput.assign(p.outputTypes.size(), nullptr);
    p.sourceInPlace.assign(p.sources.size(), false);
    p.outputInPlace.assign(p.outputTypes.size(), false);
    p.sourceMoves.assign(p.sources.size(), 0);
    p.outputMoves.assign(p.outputTypes.size(), 0);
    p.sourceCopied.assign(p.sources.size(), false);
    p.outputCopied.assign(p.outputTypes.size(), false);
    p.copyAfterMoves = o.copyAfterMoves;
  }
#endif
}

// Output i at the same address as the earlier output it is the same value as: written once.
bool sharesItsAlias(const fusec_program& p, void* const* outputs, size_t i) {
  const ptrdiff_t a = p.outputAlias[i];
  return a >= 0 && outputs[a] == outputs[i];
}

void runOnCpu(fusec_program& p, const void* const* sources, void* const* outputs) {
  Bindings env;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const Type& t = p.sources[i]->type;
    const auto* bytes = static_cast<const uint8_t*>(sources[i]);
    env[p.sourceNames[i]] = rt::fromStorage(t, std::vector<uint8_t>(bytes, bytes + rt::storageBytes(t)));
  }
  std::vector<HostTensor> outs = interpret(*p.graph, env);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (sharesItsAlias(p, outputs, i)) continue;  // written with the earlier output
    std::vector<uint8_t> bytes = rt::toStorage(outs[i]);
    std::memcpy(outputs[i], bytes.data(), bytes.size());
  }
}

#ifdef FUSEC_HAVE_CUDA
void runOnGpuOrdered(fusec_program& p, const void* const* sources, void* const* outputs);

// The call between two events: after the caller's work so far, and before the caller's next.
// A failure part way still orders the caller after what was enqueued, so that the caller does
// not free or reuse buffers under launches that are running.
void runOnGpu(fusec_program& p, const void* const* sources, void* const* outputs, void* stream) {
  rt::Executable& exe = *p.exe;
  exe.waitFor(stream);  // the caller's producers of the sources first
  try {
    runOnGpuOrdered(p, sources, outputs);
  } catch (...) {
    try {
      exe.signal(stream);
    } catch (...) {
    }
    throw;
  }
  exe.signal(stream);
  if (p.sync) exe.synchronize();
}

void runOnGpuOrdered(fusec_program& p, const void* const* sources, void* const* outputs) {
  rt::Executable& exe = *p.exe;
  // A buffer used in place whose address keeps moving (a caller that allocates it anew each
  // call) would relink the launch list every call: after copyAfterMoves moves it is copied
  // instead, and the graph stays as it is (the copy is cheaper than a capture).
  auto moved = [&](int& moves) { return p.copyAfterMoves > 0 && ++moves >= p.copyAfterMoves; };
  for (size_t i = 0; i < p.sources.size(); ++i) {
    if (sources[i] != p.lastSource[i] && p.zeroCopyInputs && !p.sourceCopied[i]) {
      if (p.lastSource[i] && moved(p.sourceMoves[i])) {
        p.sourceCopied[i] = true;  // copyInput below takes it back into its own slot
        p.sourceInPlace[i] = false;
      } else {
        p.sourceInPlace[i] = exe.bindAddress(p.sourceNames[i], const_cast<void*>(sources[i]));
      }
      p.lastSource[i] = sources[i];
    }
    if (!p.sourceInPlace[i]) {
      exe.copyInput(p.sourceNames[i], sources[i]);
      ++p.copiedIn;
    }
  }
  // An output that shares its alias's address is neither placed nor copied: the alias's storage
  // (placed or copied out) is its bytes. (Placing it would fail anyway: outputPlacements gives
  // a value's storage to its first output only.)
  for (size_t i = 0; i < p.outputTypes.size(); ++i)
    if (!sharesItsAlias(p, outputs, i) && outputs[i] != p.lastOutput[i] && p.zeroCopyOutputs && !p.outputCopied[i]) {
      if (p.lastOutput[i] && moved(p.outputMoves[i])) {
        p.outputCopied[i] = true;
        p.outputInPlace[i] = false;
        exe.unplaceOutput(i);
      } else {
        p.outputInPlace[i] = exe.placeOutput(i, outputs[i]);
      }
      p.lastOutput[i] = outputs[i];
    }
  exe.run();
  for (size_t i = 0; i < p.outputTypes.size(); ++i)
    if (!p.outputInPlace[i] && !sharesItsAlias(p, outputs, i)) {
      exe.copyOutput(i, outputs[i]);
      ++p.copiedOut;
    }
}
#endif

template <typename F>
int guarded(char* error, size_t size, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    report(e.what(), error, size);
  } catch (...) {
    report("unknown error", error, size);
  }
  return 1;
}

}  // namespace

extern "C" {

fusec_program* fusec_compile(const char* fir_text, const char* device, const char* options, char* error,
                             size_t error_size) {
  auto p = std::make_unique<fusec_program>();
  if (guarded(error, error_size, [&] {
        if (!fir_text) throw fusec::Error("no .fir text");
        compileInto(*p, fir_text, device ? device : "", parseOptions(options));
      }))
    return nullptr;
  return p.release();
}

size_t fusec_num_sources(const fusec_program* p) { return p->sources.size(); }
const char* fusec_source_name(const fusec_program* p, size_t i) {
  return i < p->sourceNames.size() ? p->sourceNames[i].c_str() : nullptr;
}
const char* fusec_source_type(const fusec_program* p, size_t i) {
  return i < p->sourceTypes.size() ? p->sourceTypes[i].c_str() : nullptr;
}
size_t fusec_num_outputs(const fusec_program* p) { return p->outputTypes.size(); }
const char* fusec_output_type(const fusec_program* p, size_t i) {
  return i < p->outputTypes.size() ? p->outputTypes[i].c_str() : nullptr;
}
ptrdiff_t fusec_output_alias(const fusec_program* p, size_t i) {
  return i < p->outputAlias.size() ? p->outputAlias[i] : -1;
}
size_t fusec_num_launches(const fusec_program* p) { return p->launches; }

int fusec_run(fusec_program* p, const void* const* sources, void* const* outputs, void* stream, char* error,
              size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!p) throw fusec::Error("no program");
    if ((!sources && !p->sources.empty()) || (!outputs && !p->outputTypes.empty())) throw fusec::Error("null pointer array");
    for (size_t i = 0; i < p->sources.size(); ++i)
      if (!sources[i]) throw fusec::Error("source " + std::to_string(i) + " ('" + p->sourceNames[i] + "') is null");
    for (size_t i = 0; i < p->outputTypes.size(); ++i)
      if (!outputs[i]) throw fusec::Error("output " + std::to_string(i) + " is null");
    ++p->calls;
#ifdef FUSEC_HAVE_CUDA
    if (p->cuda) return runOnGpu(*p, sources, outputs, stream);
#endif
    (void)stream;
    runOnCpu(*p, sources, outputs);
  });
}

const char* fusec_stats(fusec_program* p) {
  if (!p) return "";
  p->stats = "calls=" + std::to_string(p->calls) + " copied_in=" + std::to_string(p->copiedIn) +
             " copied_out=" + std::to_string(p->copiedOut);
#ifdef FUSEC_HAVE_CUDA
  if (p->exe) {
    const auto c = p->exe->relinkCounts();
    p->stats += " relinks=" + std::to_string(c.relinks) + " graph_updates=" + std::to_string(c.graphUpdates) +
                " graph_rebuilds=" + std::to_string(c.graphRebuilds) + " device_bytes=" + std::to_string(p->exe->allocatedBytes());
  }
#endif
  return p->stats.c_str();
}

void fusec_destroy(fusec_program* p) { delete p; }

const char* fusec_version(void) { return FUSEC_VERSION; }

}  // extern "C"
