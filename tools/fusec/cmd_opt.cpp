// `fusec opt FILE|- [--passes=a,b,c] [-o OUT]`: IR file in, IR file out (for tests and for
// reading what a pass does).
#include <iostream>
#include <memory>

#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/fusion/kernel_family.h"
#include "support/atomic_file.h"
#include "tools/fusec/commands.h"

namespace fusec::cli {

namespace {
struct OptArgs {
  std::string input;
  std::string passes;
  std::string output = "-";
  PassManagerOptions pm;
};
}  // namespace

Command addOptCommand(CLI::App& app) {
  auto args = std::make_shared<OptArgs>();
  std::string known;
  for (auto& n : passNames()) known += (known.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("opt", "Parse a .fir file, run passes on it and print the result");
  cmd->add_option("file", args->input, "Input .fir file, or - for stdin")->required();
  cmd->add_option("--passes", args->passes, "Comma-separated pipeline (default: none, the input is printed back verified); passes: " + known)->type_name("LIST");
  cmd->add_option("-o,--output", args->output, "Output file (default: stdout)")->type_name("FILE");
  addPassManagerFlags(*cmd, args->pm);
  return [cmd, args]() -> int {
    if (!cmd->parsed()) return -1;
    auto module = parseFile(args->input);
    checkKernelRecords(*module);
    PassManager pm(args->pm);
    if (!args->passes.empty()) pm.addPipeline(args->passes);
    pm.run(*module);
    if (args->output == "-") {
      print(*module, std::cout);
      std::cout.flush();
    } else {
      AtomicFile out(args->output);
      print(*module, out.stream());
      out.commit();
    }
    return 0;
  };
}

}  // namespace fusec::cli
