#include "passes/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "support/atomic_file.h"

namespace fusec {

PassManager::PassManager(PassManagerOptions opts) : opts_(std::move(opts)) {
  if (!opts_.log) opts_.log = &std::cerr;
  if (!opts_.irLog) opts_.irLog = opts_.log;
  checkPassNames(opts_.printBefore, "--print-ir-before");
  checkPassNames(opts_.printAfter, "--print-ir-after");
}

void checkPassNames(const std::vector<std::string>& names, const char* flag) {
  for (const auto& n : names) createPass(n);  // throws for an unknown name
  (void)flag;
}

void PassManager::addPipeline(const std::string& pipeline) {
  size_t pos = 0;
  while (pos <= pipeline.size()) {
    size_t comma = std::min(pipeline.find(',', pos), pipeline.size());
    std::string name = pipeline.substr(pos, comma - pos);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name.empty()) throw Error("empty pass name in pipeline '" + pipeline + "'");
    add(createPass(name));
    pos = comma + 1;
  }
}

static bool listed(const std::vector<std::string>& names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

void PassManager::dump(const std::string& text, int index, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(opts_.dumpDir, ec);
  if (ec) throw Error("cannot create dump directory '" + opts_.dumpDir + "': " + ec.message());
  char file[64];
  std::snprintf(file, sizeof file, "%02d_%s.fir", index, name.c_str());
  auto path = std::filesystem::path(opts_.dumpDir) / file;
  writeFileAtomically(path.string(), text);
}

bool PassManager::run(Module& m) {
  std::ostream& log = *opts_.log;
  std::ostream& irLog = *opts_.irLog;
  // A --print-ir-before/after name that no pass of this pipeline has would print nothing:
  // say so instead (e.g. autodiff, which only training programs run).
  for (const auto* flag : {&opts_.printBefore, &opts_.printAfter})
    for (const auto& want : *flag) {
      std::string have;
      bool found = false;
      for (const auto& p : passes_) {
        found |= p->name() == want;
        have += (have.empty() ? "" : ", ") + std::string(p->name());
      }
      if (!found)
        throw Error(std::string(flag == &opts_.printBefore ? "--print-ir-before" : "--print-ir-after") + ": pass '" +
                    want + "' is not in this pipeline (" + (have.empty() ? std::string("no passes") : have) + ")");
    }
  if (!opts_.disabledPatterns.empty()) {
    std::set<std::string> known;
    for (const auto& p : passes_)
      for (const std::string& n : p->patternNames()) known.insert(n);
    for (const std::string& want : opts_.disabledPatterns)
      if (!known.count(want)) {
        std::string have;
        for (const std::string& n : known) have += (have.empty() ? "" : ", ") + n;
        throw Error("--disable-pattern: no pass of this pipeline has a pattern '" + want + "' (" +
                    (have.empty() ? std::string("it has no patterns") : "patterns: " + have) + ")");
      }
    const std::set<std::string> off(opts_.disabledPatterns.begin(), opts_.disabledPatterns.end());
    for (auto& p : passes_) p->disablePatterns(off);
  }
  std::vector<std::string> stats;  // one line a pattern pass's run, for --pass-stats
  bool any = false;
  timings_.clear();
  double verifyMs = 0;  // reported beside the passes: on xl it was a fifth of the pipeline
  // The module's text at the last dump or print, printed only when something dumps or prints
  // every pass: a pass whose output is that text again changed nothing.
  const bool every = opts_.printAfterAll || opts_.printBeforeAll || !opts_.dumpDir.empty();
  std::string last = every ? printModule(m) : std::string();
  bool lastShown = false;  // `last` already went to the log
  if (!opts_.dumpDir.empty()) dump(last, 0, "input");
  for (size_t i = 0; i < passes_.size(); ++i) {
    Pass& p = *passes_[i];
    std::string name(p.name());
    if (listed(opts_.printBefore, name) || (opts_.printBeforeAll && (opts_.dumpUnchanged || !lastShown))) {
      irLog << "// ----- IR before " << name << " -----\n" << (every ? last : printModule(m));
      lastShown = true;
    } else if (opts_.printBeforeAll) {
      irLog << "// ----- IR before " << name << ": as printed above -----\n";
    }
    auto t0 = std::chrono::steady_clock::now();
    bool changed = p.run(m);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    timings_.push_back({name, ms, changed});
    if (opts_.passStats && !p.patternNames().empty()) {
      std::string line = "  " + name + " (pass " + std::to_string(i + 1) + "):";
      const auto s = p.statistics();
      for (size_t k = 0; k < s.size(); ++k) line += (k ? ", " : " ") + s[k].first + " " + std::to_string(s[k].second);
      stats.push_back(line + (s.empty() ? " nothing fired" : ""));
    }
    any |= changed;
    // A pass that changed nothing leaves the module the previous verification passed.
    if (opts_.verifyEach && changed) {
      auto v0 = std::chrono::steady_clock::now();
      try {
        verify(m, p.leavesKernelBodies() ? KernelBodies::Trust : KernelBodies::Verify);
      } catch (const Error& e) {
        throw Error("IR is invalid after pass '" + name + "': " + e.what());
      }
      verifyMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - v0).count();
    }
    std::string now;
    bool same = false;
    if (every) {
      now = printModule(m);
      same = now == last;
      if (!same) lastShown = false;
      last = now;
    }
    if (listed(opts_.printAfter, name) || (opts_.printAfterAll && (opts_.dumpUnchanged || !same))) {
      irLog << "// ----- IR after " << name << (same || !changed ? " (unchanged)" : "") << " -----\n"
          << (every ? now : printModule(m));
      lastShown = true;
    } else if (opts_.printAfterAll) {
      irLog << "// ----- IR after " << name << ": unchanged -----\n";
    }
    if (!opts_.dumpDir.empty() && (opts_.dumpUnchanged || !same)) dump(now, int(i) + 1, name);
  }
  if (opts_.passStats) {
    log << "===------------------------------------------------===\n"
        << "  pattern statistics (rewrites by pattern)\n"
        << "===------------------------------------------------===\n";
    for (const std::string& l : stats) log << l << "\n";
  }
  if (opts_.timePasses) {
    double total = 0;
    for (auto& t : timings_) total += t.ms;
    char line[160];
    log << "===------------------------------------------------===\n"
        << "  pass timing report\n"
        << "===------------------------------------------------===\n";
    std::snprintf(line, sizeof line, "  %-24s %12s %8s %8s\n", "pass", "time (ms)", "share", "changed");
    log << line;
    for (auto& t : timings_) {
      std::snprintf(line, sizeof line, "  %-24s %12.3f %7.1f%% %8s\n", t.name.c_str(), t.ms,
                    total > 0 ? 100.0 * t.ms / total : 0.0, t.changed ? "yes" : "no");
      log << line;
    }
    std::snprintf(line, sizeof line, "  %-24s %12.3f %7.1f%%\n", "total", total, 100.0);
    log << line;
    if (opts_.verifyEach) {
      std::snprintf(line, sizeof line, "  %-24s %12.3f   (after each pass, not in total)\n", "verifier", verifyMs);
      log << line;
    }
  }
  return any;
}

}  // namespace fusec
