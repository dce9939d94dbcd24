// `fusec codegen FILE|- [--passes=LIST] [--emit=cuda|kir|cubin --out-dir DIR]`: the CUDA source
// (or the kernel IR) of every kernel of a .fir module (after fuse), printed one after the other -- for the
// codegen FileCheck tests and for reading what a kernel becomes -- or written as files.
#include <iostream>

#include "codegen/generate.h"
#include "ir/parser.h"
#include "passes/fusion/kernel_family.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/emit_flags.h"

namespace fusec::cli {

namespace {
struct CodegenArgs {
  std::string input, passes;
  EmitArgs emit;
  PassManagerOptions pm;
};
}  // namespace

Command addCodegenCommand(CLI::App& app) {
  auto a = std::make_shared<CodegenArgs>();
  CLI::App* cmd = app.add_subcommand("codegen", "Print the CUDA source of every kernel of a .fir module");
  cmd->add_option("file", a->input, "Input .fir file, or - for stdin")->required();
  cmd->add_option("--passes", a->passes, "Comma-separated pipeline to run first (default: none)")->type_name("LIST");
  addEmitFlags(*cmd, a->emit, "cuda");
  addPassManagerFlags(*cmd, a->pm);
  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    auto module = parseFile(a->input);
    checkKernelRecords(*module);
    PassManager pm(a->pm);
    if (!a->passes.empty()) pm.addPipeline(a->passes);
    pm.run(*module);
    if (a->emit.emit == "ir") throw Error("codegen: --emit=ir is what `fusec opt` prints");
    if (!a->emit.outDir.empty()) return emitKernels(a->emit, *module), 0;
    if (a->emit.emit != "cuda" && a->emit.emit != "kir") throw Error("--emit=" + a->emit.emit + " needs --out-dir");
    const auto kernels = codegen::generateModule(*module, codegen::offlineTarget(), a->emit.emit == "kir");
    // Nothing to print is not success: unfused IR has no kernel ops (silence looked like one).
    if (kernels.empty())
      throw Error("codegen: " + a->input + " has no kernel ops" + (a->passes.empty() ? "" : " after --passes=" + a->passes) +
                  ": CUDA is generated from fused IR (add --passes=decompose,fuse, or give it `fusec compile`'s output)");
    for (const auto& k : kernels) {
      std::cout << "// ===== kernel " << k.name << " family=" << familyName(k.family);
      for (const auto& l : k.launches)
        std::cout << " launch " << l.function << " grid=" << l.grid[0] << " block=" << l.block[0] << " smem=" << l.dynamicSmem
                  << (l.dependent ? " dependent" : "");
      std::cout << "\n" << (a->emit.emit == "kir" ? k.kernelIr : k.source);
    }
    std::cout.flush();
    return 0;
  };
}

}  // namespace fusec::cli
