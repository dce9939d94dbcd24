#include "tools/fusec/eager_worker.h"

#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "bench/eager_protocol.h"
#include "tools/fusec/script_rows.h"

namespace fusec::cli {

namespace {

// The last line the worker printed: its answer.
std::string answer(const std::string& worker, const std::string& command, const std::vector<std::string>& args) {
  std::string cmd = shellQuoted(worker) + " " + command;
  for (const auto& a : args) cmd += " " + shellQuoted(a);
  const std::vector<std::string> lines = commandLines(cmd, "fusec-eager");
  if (lines.empty()) throw Error("fusec-eager printed no answer");
  return lines.back();
}

}  // namespace

std::optional<std::string> eagerWorker() {
  std::string path;
  if (const char* env = std::getenv("FUSEC_EAGER"); env && *env) {
    path = env;
  } else {
    path = (std::filesystem::path(selfExecutable()).parent_path() / "fusec-eager").string();
  }
  if (access(path.c_str(), X_OK) != 0 || std::filesystem::is_directory(path)) return std::nullopt;
  return path;
}

std::string eagerWorkerMissing() {
  if (const char* env = std::getenv("FUSEC_EAGER"); env && *env)
    return std::string("$FUSEC_EAGER (") + env + ") is not an executable";
  const std::string dir = std::filesystem::path(selfExecutable()).parent_path().string();
  return dir + "/fusec-eager is not built (it needs LibTorch: cmake --build " + dir + " --target fusec-eager)";
}

bench::TimedRun runEagerWorker(const std::string& worker, const bench::BenchCase& c, uint64_t seed) {
  return bench::parseTimedRunJson(answer(worker, "model", bench::eagerModelArgs(c, seed)));
}

bench::AttentionRun runEagerAttentionWorker(const std::string& worker, const bench::AttentionCase& c) {
  return bench::parseAttentionRunJson(answer(worker, "attention", bench::eagerAttentionArgs(c)));
}

}  // namespace fusec::cli
