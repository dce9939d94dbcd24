#include "codegen/emit_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codegen/nvrtc_compiler.h"
#include "support/atomic_file.h"

namespace fusec::codegen {

std::string kernelsJson(const std::vector<GeneratedKernel>& kernels) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  auto types = [](const std::vector<Type>& ts) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (auto& t : ts) j.push_back(t.str());
    return j;
  };
  for (const auto& k : kernels) {
    nlohmann::ordered_json j;
    j["name"] = k.name;
    j["family"] = familyName(k.family);
    j["image"] = k.image;
    nlohmann::ordered_json launches = nlohmann::ordered_json::array();
    for (const auto& l : k.launches)
      launches.push_back({{"function", l.function}, {"grid", l.grid}, {"block", l.block}, {"smem", l.dynamicSmem}});
    j["launches"] = launches;
    j["operands"] = types(k.operands);
    j["results"] = types(k.results);
    nlohmann::ordered_json aliases = nlohmann::ordered_json::array();
    for (auto [o, r] : k.aliases) aliases.push_back({{"operand", o}, {"result", r}});
    j["aliases"] = aliases;
    all.push_back(j);
  }
  return all.dump(2) + "\n";
}

namespace {
void writeFile(const std::string& path, const void* data, size_t n) {
  writeFileAtomically(path, std::string_view(static_cast<const char*>(data), n));
}
}  // namespace

void writeKernelFiles(const std::vector<GeneratedKernel>& kernels, Emit emit, const std::string& dir,
                      const std::string& arch) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory '" + dir + "': " + ec.message());
  // One file per image: kernels that share a source share its file (kernels.json says which).
  std::vector<const GeneratedKernel*> images;
  for (const auto& k : kernels)
    if (k.image == k.name) images.push_back(&k);
  if (emit == Emit::Cuda) {
    for (const auto* k : images) writeFile(dir + "/" + k->name + ".cu", k->source.data(), k->source.size());
  } else if (emit == Emit::KernelIr) {
    for (const auto* k : images) writeFile(dir + "/" + k->name + ".kir", k->kernelIr.data(), k->kernelIr.size());
  } else {
    std::vector<CompileJob> jobs;
    for (const auto* k : images) jobs.push_back({k->name, k->source});
    CubinCache cache(CubinCache::defaultDir());
    std::vector<Bytes> cubins = compileCubins(jobs, &cache, 0, NvrtcOptions{arch});
    for (size_t i = 0; i < images.size(); ++i)
      writeFile(dir + "/" + images[i]->name + ".cubin", cubins[i].data(), cubins[i].size());
  }
  const std::string json = kernelsJson(kernels);
  writeFile(dir + "/kernels.json", json.data(), json.size());
}

}  // namespace fusec::codegen
