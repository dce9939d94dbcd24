// fusec-eager: the eager LibTorch baseline of `fusec bench` and `fusec bench attention`, one
// row per process (bench/eager_protocol.h). It is the only executable that links LibTorch;
// fusec starts it when eager rows are asked for.
//
//   fusec-eager model KEY VALUE ...      a zoo model's forward, fwd_bwd or AdamW step
//   fusec-eager attention KEY VALUE ...  naive causal attention, forward and backward
//
// It prints one JSON line (the times and memory, or {"error": ...} when the run failed, a CUDA
// OOM among them) and exits 0; a wrong call is one line on stderr and exit 2.
#include <cuda_runtime_api.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "bench/attention_bench.h"
#include "bench/eager_protocol.h"
#include "bench/eager_runner.h"

namespace {

// LibTorch's messages carry a C++ backtrace after their first line; a row's status is the line.
std::string firstLine(const char* what) {
  const std::string s = what;
  return s.substr(0, s.find('\n'));
}

int usage(const std::string& why) {
  std::cerr << "fusec-eager: error: " << why
            << " (usage: fusec-eager model|attention --key value ...; fusec bench starts it)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fusec;
  if (argc < 2) return usage("no command");
  const std::string command = argv[1];
  if (command == "--version") {
    std::cout << "fusec-eager " << FUSEC_VERSION << "\n";
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  // Parses the case (a wrong call: exit 2), runs it, answers one line (a failed run: its error).
  auto serve = [&](auto parse, auto run) {
    decltype(parse()) c;
    try {
      c = parse();
    } catch (const std::exception& e) {
      return usage(e.what());
    }
    // The primary context made current before LibTorch's first cuBLAS call, which otherwise
    // warns that it found none (in fusec's process the compiled side had made it current).
    cudaFree(nullptr);
    try {
      std::cout << run(c) << std::endl;
    } catch (const std::bad_alloc&) {
      std::cout << bench::eagerErrorJson("out of host memory") << std::endl;
    } catch (const std::exception& e) {
      std::cout << bench::eagerErrorJson(firstLine(e.what())) << std::endl;
    }
    return 0;
  };
  if (command == "model")
    return serve([&] { return bench::parseEagerModelArgs(args); },
                 [](const bench::EagerModelCase& c) {
                   const Bindings env = bench::benchInputs(*c.c.model.model, c.c.batch, c.c.seq, c.seed);
                   return bench::timedRunJson(bench::runEager(c.c, env));
                 });
  if (command == "attention")
    return serve([&] { return bench::parseEagerAttentionArgs(args); },
                 [](const bench::AttentionCase& c) { return bench::attentionRunJson(bench::runEagerAttention(c)); });
  return usage("unknown command '" + command + "'");
}
