#include "codegen/nvrtc_compiler.h"

#include <atomic>
#include <exception>
#include <iostream>
#include <filesystem>
#include <mutex>
#include <thread>

#include "support/progress.h"

#ifdef FUSEC_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace fusec::codegen {

bool nvrtcAvailable() {
#ifdef FUSEC_HAVE_NVRTC
  return true;
#else
  return false;
#endif
}

std::string nvrtcVersion() {
#ifdef FUSEC_HAVE_NVRTC
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "?";
  return std::to_string(major) + "." + std::to_string(minor);
#else
  return "";
#endif
}

std::vector<std::string> nvrtcFlags(const NvrtcOptions& o) {
  std::vector<std::string> f = {"-arch=" + o.arch, "--std=c++17", "-default-device"};
#ifdef FUSEC_CUDA_INCLUDE
  f.push_back("-I" FUSEC_CUDA_INCLUDE);
  // CUDA 13 keeps libcu++ (which cuda_bf16.h uses) under include/cccl.
  if (std::filesystem::exists(FUSEC_CUDA_INCLUDE "/cccl")) f.push_back("-I" FUSEC_CUDA_INCLUDE "/cccl");
#endif
  return f;
}

#ifdef FUSEC_HAVE_NVRTC
namespace {
void check(nvrtcResult r, const std::string& what, const std::string& name) {
  if (r != NVRTC_SUCCESS) throw Error("nvrtc: " + what + " of kernel '" + name + "' failed: " + nvrtcGetErrorString(r));
}
}  // namespace

Bytes compileCubin(const std::string& source, const std::string& name, const NvrtcOptions& o) {
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr), "creating the program",
        name);
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  const std::vector<std::string> flags = nvrtcFlags(o);
  std::vector<const char*> argv;
  for (auto& f : flags) argv.push_back(f.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, int(argv.size()), argv.data());
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    std::string first = log.substr(0, log.find('\n'));
    throw CompileError("nvrtc: kernel '" + name + "' does not compile: " + (first.empty() ? nvrtcGetErrorString(r) : first),
                       log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog, &size), "getting the cubin size", name);
  if (size == 0) throw Error("nvrtc: kernel '" + name + "' produced no cubin (is -arch a real sm_ architecture?)");
  Bytes cubin(size);
  check(nvrtcGetCUBIN(prog, reinterpret_cast<char*>(cubin.data())), "getting the cubin", name);
  return cubin;
}
#else
Bytes compileCubin(const std::string&, const std::string& name, const NvrtcOptions&) {
  throw Error("nvrtc: cannot compile kernel '" + name + "': fusec was built without NVRTC");
}
#endif

std::vector<Bytes> compileCubins(const std::vector<CompileJob>& jobs, const CubinCache* cache, int threads,
                                 const NvrtcOptions& o, CompileStats* stats) {
  std::vector<Bytes> out(jobs.size());
  std::string options;
  for (auto& f : nvrtcFlags(o)) options += f + " ";
  const std::string version = nvrtcVersion();
  const std::string stamp = CubinCache::stamp(version, o.arch);
  std::atomic<size_t> next{0};
  std::atomic<int> compiled{0}, cached{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex errorMutex;
  // A cold compile of a large model takes minutes: its progress, on stderr, once it has taken
  // two seconds (support/progress.h; a warm or small compile says nothing).
  const int n = std::min<int>(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency())),
                              int(std::max<size_t>(jobs.size(), 1)));
  Progress progress(std::cerr, "NVRTC: kernels compiled or cached (" + std::to_string(n) + " threads)",
                    int64_t(jobs.size()), Progress::Style::Counts);
  progress.quietFor(2.0);
  // NVRTC is thread-safe per program: each worker takes the next job until none is left.
  auto worker = [&] {
    for (size_t i; !failed && (i = next++) < jobs.size();) {
      try {
        const std::string key = CubinCache::key(jobs[i].source, options, version, o.arch);
        if (cache) {
          CacheLookup hit = cache->load(key, stamp);
          if (hit.cubin) {
            out[i] = std::move(*hit.cubin);
            ++cached;
            progress.step();
            continue;
          }
          if (!hit.problem.empty()) {  // one line per damaged entry; it is rebuilt just below
            std::lock_guard<std::mutex> lock(errorMutex);
            std::cerr << "fusec: warning: kernel cache entry " << cache->pathOf(key) << " (kernel " << jobs[i].name
                      << "): " << hit.problem << "; rebuilt\n";
          }
        }
        out[i] = compileCubin(jobs[i].source, jobs[i].name, o);
        ++compiled;
        if (cache) cache->store(key, stamp, out[i]);
        progress.step(jobs[i].name);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (stats) *stats = {compiled.load(), cached.load()};
  return out;
}

}  // namespace fusec::codegen
