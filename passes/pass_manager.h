// Runs a pipeline of passes with the observability of LLVM/XLA pass managers: IR printed
// before/after chosen passes, one numbered .fir dump per pass, timings, verify-after-each.
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace fusec {

struct PassManagerOptions {
  bool verifyEach = true;
  bool printBeforeAll = false, printAfterAll = false;
  std::vector<std::string> printBefore, printAfter;  // pass names
  std::string dumpDir;                               // one NN_name.fir per pass when set
  // --print-ir-after-all, --print-ir-before-all and --dump-dir leave out the IR of a pass
  // that changed nothing (one line says so instead; no file): medium's train step dumped
  // 8.8 MB over 16 files, most of them copies. --dump-unchanged keeps them.
  bool dumpUnchanged = false;
  bool timePasses = false;
  // Rewrite patterns switched off (by name, e.g. canonicalize's "fold-constant"); an unknown
  // name is an error. passStats prints, after the run, what each pattern pass's patterns did.
  std::vector<std::string> disabledPatterns;
  bool passStats = false;
  std::ostream* log = nullptr;                       // where timings go (default: std::cerr)
  std::ostream* irLog = nullptr;                     // where IR prints go (default: log); the CLI's stdout
};

struct PassTiming {
  std::string name;
  double ms;
  bool changed;
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions opts = {});
  // "a,b,c" -> passes; throws Error for an unknown or empty name.
  void addPipeline(const std::string& pipeline);
  void add(std::unique_ptr<Pass> p) { passes_.push_back(std::move(p)); }
  // Runs every pass in order; returns true if any changed the module.
  bool run(Module& m);
  const std::vector<PassTiming>& timings() const { return timings_; }

 private:
  void dump(const std::string& text, int index, const std::string& name);
  std::vector<std::unique_ptr<Pass>> passes_;
  PassManagerOptions opts_;
  std::vector<PassTiming> timings_;
};

// Checks that every name in `names` is a registered pass (for --print-ir-after=NAME).
void checkPassNames(const std::vector<std::string>& names, const char* flag);

}  // namespace fusec
