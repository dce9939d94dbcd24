// CUDA source -> cubin for the target's architecture through NVRTC (linked; libcuda is not needed), many sources in
// parallel, through the on-disk CubinCache. When fusec is built without NVRTC
// (FUSEC_HAVE_NVRTC undefined), nvrtcAvailable() is false and compiling throws Error.
#pragma once
#include <string>
#include <vector>

#include "codegen/cubin_cache.h"
#include "codegen/target.h"
#include "ir/graph.h"

namespace fusec::codegen {

// A failed compile: what() is one line; log() is NVRTC's full log, printed on demand.
struct CompileError : Error {
  CompileError(const std::string& msg, std::string log) : Error(msg), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

struct NvrtcOptions {
  std::string arch = Target().arch();  // NVRTC's -arch: the default target's unless a device says
};

bool nvrtcAvailable();
std::string nvrtcVersion();  // "13.0"; "" without NVRTC
std::vector<std::string> nvrtcFlags(const NvrtcOptions& o);

// One source to a cubin (no cache). `name` names the program in errors.
Bytes compileCubin(const std::string& source, const std::string& name, const NvrtcOptions& o = {});

struct CompileJob {
  std::string name, source;
};
struct CompileStats {
  int compiled = 0, cached = 0;
};

// Every job's cubin, in order, compiled by up to `threads` threads (0: hardware
// concurrency); cache may be null. The first failure is rethrown after all threads stop.
std::vector<Bytes> compileCubins(const std::vector<CompileJob>& jobs, const CubinCache* cache, int threads = 0,
                                 const NvrtcOptions& o = {}, CompileStats* stats = nullptr);

}  // namespace fusec::codegen
