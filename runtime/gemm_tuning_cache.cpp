#include "runtime/gemm_tuning_cache.h"

#include "support/atomic_file.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace fusec::rt {
namespace {

// Bumped when the entry layout changes: an older file is then foreign and re-tuned.
// 2: the search widened beyond the heuristic's list (runtime/gemm_candidates.h); choices
// made from the narrower list are tuned again.
constexpr const char* kFormat = "fusec-gemm-tuning-2";

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)x);
  return buf;
}

uint64_t parseHex64(const std::string& s) {
  if (s.size() != 16) throw std::runtime_error("algorithm word '" + s + "' is not 16 hex digits");
  uint64_t x = 0;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) throw std::runtime_error("algorithm word '" + s + "' is not hex");
    x = x * 16 + uint64_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
  }
  return x;
}

// JSON has no NaN: an untimed figure is null.
nlohmann::json msJson(double ms) { return std::isnan(ms) ? nlohmann::json(nullptr) : nlohmann::json(ms); }
double msFrom(const nlohmann::json& j) { return j.is_null() ? NAN : j.get<double>(); }

void warn(const std::string& msg) { std::cerr << "fusec: warning: " << msg << "\n"; }

}  // namespace

const char* sourceName(GemmTuning::Source s) {
  switch (s) {
    case GemmTuning::Source::Tuned: return "tuned";
    case GemmTuning::Source::Cached: return "cached";
    case GemmTuning::Source::Heuristic: return "heuristic";
  }
  return "?";
}

std::string gemmTuningKey(const GemmPlan& p, bool tf32, int alignA, int alignB, int alignC, int sms) {
  const GemmShapeKey k = shapeKey(p);
  std::ostringstream s;
  s << dtypeName(k.dtype) << " compute=" << (k.dtype == DType::f32 && tf32 ? "32F_FAST_TF32" : "32F") << " M=" << k.M
    << " N=" << k.N << " K=" << k.K << " batch=" << k.batch << " a=" << (k.aCol ? "col" : "row")
    << " b=" << (k.bCol ? "col" : "row") << " ld=" << k.lda << "," << k.ldb << "," << k.ldc << " stride=" << k.sa << ","
    << k.sb << "," << k.sc << " align=" << alignA << "," << alignB << "," << alignC;
  if (k.widenC) s << " c=f32";
  if (sms > 0) s << " sms=" << sms;
  return s.str();
}

GemmTuningCache::GemmTuningCache(std::string dir, std::string device, int sm, uint64_t cublasLtVersion)
    : dir_(std::move(dir)), device_(std::move(device)), sm_(sm), lib_(cublasLtVersion) {
  if (dir_.empty()) return;
  path_ = dir_ + "/" + fileName(device_, sm_, lib_);
  if (auto loaded = readFile(true)) entries_ = std::move(*loaded);
}

std::string GemmTuningCache::fileName(const std::string& device, int sm, uint64_t cublasLtVersion) {
  std::string name;
  for (char c : device) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return "gemm-tuning-" + name + "-sm" + std::to_string(sm) + "-cublasLt" + std::to_string(cublasLtVersion) + ".json";
}

GemmTuningCache& GemmTuningCache::shared(const std::string& dir, const std::string& device, int sm,
                                         uint64_t cublasLtVersion) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::string, int, uint64_t>, std::unique_ptr<GemmTuningCache>> caches;
  std::lock_guard<std::mutex> lock(mu);
  auto& c = caches[{dir, device, sm, cublasLtVersion}];
  if (!c) c = std::make_unique<GemmTuningCache>(dir, device, sm, cublasLtVersion);
  return *c;
}

std::optional<GemmTuning> GemmTuningCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void GemmTuningCache::put(const std::string& key, const GemmTuning& t) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key] = t;
  dirty_ = true;
}

size_t GemmTuningCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

bool GemmTuningCache::dirty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dirty_;
}

std::optional<std::map<std::string, GemmTuning>> GemmTuningCache::readFile(bool warnOnBad) const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return std::nullopt;  // absent: nothing tuned yet
  std::stringstream text;
  try {
    // Only a regular file is read: a named pipe in the cache directory would block forever.
    if (!S_ISREG(st.st_mode)) throw std::runtime_error("not a regular file");
    std::ifstream f(path_, std::ios::binary);
    if (!f) return std::nullopt;
    text << f.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (j.at("format").get<std::string>() != kFormat) throw std::runtime_error("unknown format");
    // The name says which device and library wrote it; the header proves it (a copied or
    // renamed file must not hand one GPU's algorithms to another).
    if (j.at("device").get<std::string>() != device_ || j.at("sm").get<int>() != sm_ ||
        j.at("cublaslt").get<uint64_t>() != lib_)
      throw std::runtime_error("written for " + j.at("device").get<std::string>() + " sm" +
                               std::to_string(j.at("sm").get<int>()) + " cuBLASLt " +
                               std::to_string(j.at("cublaslt").get<uint64_t>()));
    std::map<std::string, GemmTuning> out;
    for (const auto& [key, e] : j.at("entries").items()) {
      GemmTuning t;
      const auto& words = e.at("algo");
      if (!words.is_array() || words.size() != t.algo.size()) throw std::runtime_error("an algorithm is not 8 words");
      for (size_t i = 0; i < t.algo.size(); ++i) t.algo[i] = parseHex64(words[i].get<std::string>());
      t.algoDesc = e.at("desc").get<std::string>();
      t.candidates = e.at("candidates").get<int>();
      t.heuristicMs = msFrom(e.at("heuristic_ms"));
      t.tunedMs = msFrom(e.at("tuned_ms"));
      t.source = GemmTuning::Source::Cached;
      out.emplace(key, std::move(t));
    }
    return out;
  } catch (const std::exception& e) {
    if (warnOnBad) warn("ignoring the GEMM tuning cache " + path_ + " (" + e.what() + "); its GEMMs are re-tuned");
    return std::nullopt;
  }
}

void GemmTuningCache::save() {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty() || !dirty_) return;
  // Entries another process saved since we loaded are kept; ours win on the same key.
  std::map<std::string, GemmTuning> all = readFile(false).value_or(std::map<std::string, GemmTuning>{});
  for (const auto& [k, t] : entries_) all[k] = t;
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["device"] = device_;
  j["sm"] = sm_;
  j["cublaslt"] = lib_;
  nlohmann::ordered_json entries = nlohmann::ordered_json::object();
  for (const auto& [k, t] : all) {
    nlohmann::ordered_json words = nlohmann::ordered_json::array();
    for (uint64_t w : t.algo) words.push_back(hex64(w));
    entries[k] = {{"algo", words},
                  {"desc", t.algoDesc},
                  {"candidates", t.candidates},
                  {"heuristic_ms", msJson(t.heuristicMs)},
                  {"tuned_ms", msJson(t.tunedMs)}};
  }
  j["entries"] = entries;
  const std::string text = j.dump(1) + "\n";

  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  try {
    writeFileAtomically(path_, text);
  } catch (const Error& e) {
    warn("cannot write the GEMM tuning cache (" + std::string(e.what()) + "); the next run tunes again");
  }
  dirty_ = false;  // one warning, not one per save
}

}  // namespace fusec::rt
