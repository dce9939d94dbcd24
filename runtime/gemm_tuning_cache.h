// The on-disk cache of autotuned GEMM algorithms (runtime/cublaslt_gemm.h times cuBLASLt's
// candidates at first use on the device and records the fastest here), so that a warm run
// does not tune again.
//
// One small JSON file per (device, sm, cuBLASLt version) beside the cubin cache:
//   $XDG_CACHE_HOME/fusec/gemm-tuning-<device>-sm<NN>-cublasLt<version>.json
// holding, per GEMM key (gemmTuningKey: shape, transposes, batch and strides, dtype, compute
// type, operand alignments), the algorithm's opaque cublasLtMatmulAlgo_t bytes (cuBLASLt
// documents the struct as trivially serialisable for one library version; the runtime still
// re-checks it with cublasLtMatmulAlgoCheck before use), a readable description and the
// times measured when it was tuned.
//
// Robustness: a missing file is an empty cache; a corrupt file, or one written for another
// device or library (the header is checked, not only the name), is ignored with one warning
// on stderr and its GEMMs are re-tuned. save() writes a temporary file and renames it into
// place (readers never see half a file) after merging what other processes saved meanwhile;
// two processes saving at once can lose each other's new entries, which only costs a re-tune.
// Within a process, shared() hands every Executable the same cache object per file, so one
// process makes one choice per key (two Executables of one program run the same algorithms)
// and reads the file once. Thread-safe. Pure C++ (no CUDA headers): the CPU tests cover it.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/gemm_plan.h"

namespace fusec::rt {

// What the runtime chose for one GEMM key, and how.
struct GemmTuning {
  enum class Source {
    Tuned,      // timed in this process
    Cached,     // loaded from the disk cache (times are those measured when it was tuned)
    Heuristic,  // cuBLASLt's first choice, untimed (autotuning off, or first met under capture)
  };
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t's opaque data
  std::string algoDesc;            // "algo 66 tile 20 stages 8 split-k 1 swizzle 0 cluster 2 ..."
  int candidates = 0;              // algorithms timed (those that ran); 0 when untimed
  double heuristicMs = NAN;        // median of the heuristic's first algorithm, one cuBLASLt call
  double tunedMs = NAN;            // median of the chosen algorithm, one cuBLASLt call
  Source source = Source::Heuristic;
};
const char* sourceName(GemmTuning::Source s);  // "tuned", "cached", "heuristic"

// The cache key of a plan: everything that decides which algorithms are valid and fast,
// except the device and library (those name the file). `tf32` matters for f32 only.
// `sms` > 0: the GEMM is planned for that many SMs (cuBLASLt's SM count target); 0: all.
std::string gemmTuningKey(const GemmPlan& p, bool tf32, int alignA, int alignB, int alignC, int sms = 0);

class GemmTuningCache {
 public:
  // `dir` empty: a cache in memory only (nothing is read or written).
  GemmTuningCache(std::string dir, std::string device, int sm, uint64_t cublasLtVersion);

  // The process-wide cache of one (dir, device, sm, library): created (and its file read) at
  // the first call, alive until the process ends.
  static GemmTuningCache& shared(const std::string& dir, const std::string& device, int sm, uint64_t cublasLtVersion);

  // "gemm-tuning-NVIDIA_H100_80GB_HBM3-sm90-cublasLt130100.json"
  static std::string fileName(const std::string& device, int sm, uint64_t cublasLtVersion);
  const std::string& path() const { return path_; }  // empty for a memory-only cache

  std::optional<GemmTuning> find(const std::string& key) const;
  void put(const std::string& key, const GemmTuning& t);  // stored as-is; marks the cache dirty
  size_t size() const;
  bool dirty() const;

  // Writes every entry (merged over the file's current entries) atomically when dirty.
  // Best effort: a cache that cannot be written warns once and only costs re-tuning.
  void save();

 private:
  // The file's entries; nullopt (with a warning when `warn`) if absent, corrupt or foreign.
  std::optional<std::map<std::string, GemmTuning>> readFile(bool warn) const;

  std::string dir_, path_, device_;
  int sm_;
  uint64_t lib_;
  mutable std::mutex mu_;  // guards entries_ and dirty_
  std::map<std::string, GemmTuning> entries_;
  bool dirty_ = false;
};

}  // namespace fusec::rt
