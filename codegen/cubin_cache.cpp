#include "codegen/cubin_cache.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace fusec::codegen {

namespace {
constexpr char kMagic[8] = {'F', 'U', 'S', 'E', 'C', 'B', 'N', '1'};
struct Header {
  char magic[8];
  uint64_t length;
  uint64_t checksum;
};
}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

CubinCache::CubinCache(std::string dir) : dir_(std::move(dir)) {}

std::string CubinCache::defaultDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fusec";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fusec";
  return "/tmp/fusec-cache";
}

std::string CubinCache::key(const std::string& source, const std::string& options, const std::string& nvrtcVersion,
                            const std::string& arch) {
  // Fields joined with their lengths, so that no two different field lists give one text;
  // two independent 64-bit hashes make a 128-bit key.
  std::string text;
  for (const std::string* f : {&source, &options, &nvrtcVersion, &arch}) text += std::to_string(f->size()) + ":" + *f;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)fnv1a64(text.data(), text.size()),
                (unsigned long long)fnv1a64(text.data(), text.size(), 0x84222325cbf29ce4ull));
  return buf;
}

std::string CubinCache::pathOf(const std::string& key) const { return dir_ + "/" + key + ".cubin"; }

std::optional<Bytes> CubinCache::load(const std::string& key) const {
  std::ifstream f(pathOf(key), std::ios::binary);
  if (!f) return std::nullopt;
  Header h{};
  if (!f.read(reinterpret_cast<char*>(&h), sizeof h) || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  if (h.length > (uint64_t(1) << 32)) return std::nullopt;
  Bytes data(h.length);
  if (!f.read(reinterpret_cast<char*>(data.data()), std::streamsize(h.length))) return std::nullopt;
  if (f.peek() != std::char_traits<char>::eof()) return std::nullopt;  // trailing bytes
  if (fnv1a64(data.data(), data.size()) != h.checksum) return std::nullopt;
  return data;
}

void CubinCache::store(const std::string& key, const Bytes& cubin) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  static std::atomic<uint64_t> counter{0};
  std::ostringstream tmp;
  tmp << pathOf(key) << ".tmp." << ::getpid() << "." << std::this_thread::get_id() << "." << counter++;
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.length = cubin.size();
  h.checksum = fnv1a64(cubin.data(), cubin.size());
  {
    std::ofstream f(tmp.str(), std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(reinterpret_cast<const char*>(cubin.data()), std::streamsize(cubin.size()));
    if (!f.flush()) {
      std::filesystem::remove(tmp.str(), ec);
      return;
    }
  }
  std::filesystem::rename(tmp.str(), pathOf(key), ec);
  if (ec) std::filesystem::remove(tmp.str(), ec);
}

}  // namespace fusec::codegen
