#include <iostream>

#include "tools/fusec/commands.h"

namespace fusec::cli {

void addPassManagerFlags(CLI::App& cmd, PassManagerOptions& o) {
  cmd.add_flag("--print-ir-after-all", o.printAfterAll, "Print the IR after every pass (to stdout, before the output)");
  cmd.add_flag("--print-ir-before-all", o.printBeforeAll, "Print the IR before every pass (to stdout, before the output)");
  cmd.add_option("--print-ir-after", o.printAfter, "Print the IR after the named pass (repeatable)")
      ->delimiter(',')
      ->type_name("NAME");
  cmd.add_option("--print-ir-before", o.printBefore, "Print the IR before the named pass (repeatable)")
      ->delimiter(',')
      ->type_name("NAME");
  cmd.add_option("--dump-dir", o.dumpDir, "Write the IR before the pipeline (00_input.fir) and after each pass that changed it as DIR/NN_pass.fir")
      ->type_name("DIR");
  cmd.add_flag("--dump-unchanged", o.dumpUnchanged,
               "With --print-ir-after-all, --print-ir-before-all or --dump-dir, also print (write) the IR of passes that changed "
               "nothing (default: one line instead of a copy, no file)");
  cmd.add_flag("--time-passes", o.timePasses, "Print a table of pass timings (to stderr)");
  cmd.add_option("--disable-pattern", o.disabledPatterns,
                 "Switch off a rewrite pattern by name, e.g. canonicalize's fold-constant (repeatable; --pass-stats lists what fired)")
      ->delimiter(',')
      ->type_name("NAME");
  cmd.add_flag("--pass-stats", o.passStats, "Print, after the pipeline, how often each rewrite pattern fired (to stderr)");
  cmd.add_flag_callback("--no-verify", [&o] { o.verifyEach = false; }, "Skip the verifier after each pass");
  o.irLog = &std::cout;  // a dump is output: `| less`, `| head` and `> file` take it
}

}  // namespace fusec::cli
