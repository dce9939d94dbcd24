// `fusec device`: the CUDA device fusec would run on (name, compute capability, memory), or
// `error: no CUDA device` and exit 1 where there is none or no driver; the smallest GPU
// entry point, which also proves the binary starts without libcuda.
#include <cstdio>

#include "tools/fusec/commands.h"
#ifdef FUSEC_HAVE_CUDA
#include "runtime/device.h"
#endif

namespace fusec::cli {

Command addDeviceCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("device", "Print the CUDA device fusec runs on");
  return [cmd]() -> int {
    if (!cmd->parsed()) return -1;
#ifdef FUSEC_HAVE_CUDA
    rt::DeviceInfo d = rt::openDevice();
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    std::printf("%s (sm_%d%d), %.2f GiB free of %.2f GiB\n", d.name.c_str(), d.target.major, d.target.minor,
                double(d.freeBytes) / kGiB, double(d.totalBytes) / kGiB);
    return 0;
#else
    throw Error("no CUDA device (fusec was built without the CUDA toolkit)");
#endif
  };
}

}  // namespace fusec::cli
