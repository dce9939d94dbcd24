#include "bench/roofline.h"

#include <algorithm>
#include <set>

#include "runtime/gemm_plan.h"

namespace fusec::bench {

namespace {

int64_t bytesOf(const Type& t) { return t.numel() * dtypeBytes(t.dtype); }

}  // namespace

LaunchTraffic launchTraffic(const Op& launch) {
  LaunchTraffic t;
  if (launch.kind == OpKind::Matmul) {
    const rt::GemmPlan p = rt::planGemm(launch);
    t.gemmDtype = p.dtype;
    t.flops = p.flops();
    t.bytesRead = bytesOf(launch.operands[0]->type) + bytesOf(launch.operands[1]->type);
    t.bytesWritten = bytesOf(launch.result()->type);
    if (p.beta != 0) t.bytesRead += t.bytesWritten;
    return t;
  }
  if (launch.kind != OpKind::Kernel) throw Error("internal: '" + std::string(launch.info().name) + "' is not a launch");
  std::set<const Value*> seen;
  for (const Value* v : launch.operands)
    if (seen.insert(v).second) t.bytesRead += bytesOf(v->type);
  for (const auto& r : launch.results) t.bytesWritten += bytesOf(r->type);
  return t;
}

double floorMs(int64_t bytes, int64_t flops, double copyGBps, double gemmTflops) {
  const double memory = copyGBps > 0 ? double(bytes) / (copyGBps * 1e9) * 1e3 : 0;
  const double math = gemmTflops > 0 ? double(flops) / (gemmTflops * 1e12) * 1e3 : 0;
  return std::max(memory, math);
}

}  // namespace fusec::bench
