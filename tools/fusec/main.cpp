// fusec: a kernel-fusion compiler for transformer graphs. Every failure ends as one line on
// stderr and exit code 1.
#include <cerrno>
#include <cstring>
#include <iostream>

#include "ir/graph.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/job.h"

int main(int argc, char** argv) {
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
