// fusec: a kernel-fusion compiler for transformer graphs. Every failure ends as one line on
// stderr and exit code 1.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "ir/graph.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/job.h"

// The passes build and drop millions of small hash nodes over graphs of up to ~10^6 ops, and
// with glibc's malloc defaults compile time grew faster than the graph: fastbins consolidated
// at every large request, the heap trimmed and grown again, hash bucket arrays above 128 KB
// mapped and faulted in afresh, and 4 KB pages (TLB misses over a few hundred MB of IR). These
// tunables (read by glibc only at process start, so fusec executes itself once with them; a
// 1,000-layer compile is about 35% faster: bench/RESULTS.md, issue 39) turn that off and ask
// for transparent huge pages. The re-executed process gives its children (workers, Python
// scripts) the caller's own environment back. Set FUSEC_MALLOC_TUNED=1 to run as started.
constexpr const char* kMallocTunables =
    "glibc.malloc.mxfast=0:glibc.malloc.trim_threshold=4294967295:glibc.malloc.top_pad=67108864:"
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.hugetlb=1";

void tuneMalloc(int argc, char** argv) {
  // Only the commands that build graphs pay for the second exec: `--version`, `--help` and
  // `device` start in a few milliseconds.
  static const char* const kGraphCommands[] = {"compile", "opt", "run", "codegen", "bench", "profile"};
  bool graphs = false;
  for (const char* c : kGraphCommands) graphs |= argc > 1 && std::strcmp(argv[1], c) == 0;
  if (!graphs) return;
  if (const char* tuned = std::getenv("FUSEC_MALLOC_TUNED")) {
    if (std::strcmp(tuned, "re-executed") == 0) {  // restore what the caller had
      if (const char* was = std::getenv("FUSEC_GLIBC_TUNABLES_WAS"); was && *was) setenv("GLIBC_TUNABLES", was + 1, 1);
      else unsetenv("GLIBC_TUNABLES");
      unsetenv("FUSEC_GLIBC_TUNABLES_WAS");
      unsetenv("FUSEC_MALLOC_TUNED");
    }
    return;
  }
  const char* was = std::getenv("GLIBC_TUNABLES");
  // "=" marks a value that was set (possibly empty); "" one that was not.
  setenv("FUSEC_GLIBC_TUNABLES_WAS", was ? (std::string("=") + was).c_str() : "", 1);
  setenv("GLIBC_TUNABLES", was && *was ? (std::string(was) + ":" + kMallocTunables).c_str() : kMallocTunables, 1);
  setenv("FUSEC_MALLOC_TUNED", "re-executed", 1);
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): run as started, the environment as it was.
  if (was) setenv("GLIBC_TUNABLES", was, 1);
  else unsetenv("GLIBC_TUNABLES");
  unsetenv("FUSEC_GLIBC_TUNABLES_WAS");
  unsetenv("FUSEC_MALLOC_TUNED");
}

int main(int argc, char** argv) {
  tuneMalloc(argc, argv);
  fusec::cli::setCommandLine(argc, argv);  // --gpus N starts workers with the same command line
  CLI::App app{"fusec: a kernel-fusion compiler for transformer graphs", "fusec"};
  app.set_version_flag("--version", std::string("fusec ") + FUSEC_VERSION);
  app.require_subcommand(1);
  std::vector<fusec::cli::Command> commands = {fusec::cli::addOptCommand(app), fusec::cli::addCompileCommand(app),
                                               fusec::cli::addRunCommand(app), fusec::cli::addCodegenCommand(app),
                                               fusec::cli::addDeviceCommand(app),
                                               fusec::cli::addBenchCommand(app), fusec::cli::addProfileCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  // Inside a job of several ranks, each error says which rank it is.
  const std::string rank = fusec::cli::rankPrefix();
  try {
    for (auto& run : commands) {
      int rc = run();
      if (rc < 0) continue;
      // Whatever a command printed is its result: one that did not reach stdout (a full disk,
      // a closed pipe) is a failure, not exit 0.
      std::cout.flush();
      if (!std::cout) throw fusec::Error(std::string("cannot write the output to stdout: ") + std::strerror(errno));
      return rc;
    }
  } catch (const std::bad_alloc&) {
    std::cerr << "error: " << rank << "out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    const std::string line = fusec::errorLine(e);
    std::cerr << (rank.empty() || line.rfind("error: ", 0) != 0 ? line : "error: " + rank + line.substr(7)) << "\n";
    return 1;
  }
  return 1;
}
