#include "tools/fusec/emit_flags.h"

#include "codegen/emit_files.h"
#include "codegen/generate.h"

namespace fusec::cli {

void addEmitFlags(CLI::App& cmd, EmitArgs& a, const std::string& defaultEmit) {
  a.emit = defaultEmit;
  cmd.add_option("--emit", a.emit,
                 "What to write: ir (the module), cuda (one .cu per kernel and kernels.json), kir (each kernel's "
                 "statements as kernel IR, one .kir per kernel), cubin (cubins for an H100/H200, sm_90a, or sm_90 with "
                 "FUSEC_WGMMA=0, and kernels.json); cuda, kir and cubin need --out-dir, but for `fusec codegen`, which "
                 "prints cuda or kir (default: " + defaultEmit + ")")
      ->check(CLI::IsMember({"ir", "cuda", "kir", "cubin"}))
      ->type_name("KIND");
  cmd.add_option("--out-dir", a.outDir, "Directory for --emit=cuda|kir|cubin")->type_name("DIR");
}

bool emitKernels(const EmitArgs& a, const Module& m) {
  if (a.emit == "ir") return false;
  if (a.outDir.empty()) throw Error("--emit=" + a.emit + " needs --out-dir");
  const codegen::Target target = codegen::offlineTarget();
  codegen::writeKernelFiles(codegen::generateModule(m, target, a.emit == "kir"),
                            a.emit == "cuda"  ? codegen::Emit::Cuda
                            : a.emit == "kir" ? codegen::Emit::KernelIr
                                              : codegen::Emit::Cubin, a.outDir, target.arch());
  return true;
}

}  // namespace fusec::cli
