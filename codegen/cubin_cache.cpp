#include "codegen/cubin_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>

#include "ir/error.h"
#include "support/atomic_file.h"

namespace fusec::codegen {

namespace {
// Format 2 added the stamp; a format-1 entry (FUSECBN1) is stale and rebuilt.
constexpr char kMagic[8] = {'F', 'U', 'S', 'E', 'C', 'B', 'N', '2'};
constexpr char kOldMagic[7] = {'F', 'U', 'S', 'E', 'C', 'B', 'N'};
struct Header {
  char magic[8];
  uint64_t length;    // of the payload
  uint64_t checksum;  // of the stamp and the payload
  uint32_t stampLength;
  uint32_t reserved;
};
constexpr uint64_t kMaxCubin = uint64_t(1) << 32;

uint64_t checksumOf(const std::string& stamp, const Bytes& payload) {
  return fnv1a64(payload.data(), payload.size(), fnv1a64(stamp.data(), stamp.size()));
}
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

std::string CubinCache::stamp(const std::string& nvrtcVersion, const std::string& arch) {
  return std::string("fusec ") + FUSEC_VERSION + ", nvrtc " + (nvrtcVersion.empty() ? "none" : nvrtcVersion) + ", " +
         arch;
}

std::string CubinCache::pathOf(const std::string& key) const { return dir_ + "/" + key + ".cubin"; }

CacheLookup CubinCache::load(const std::string& key, const std::string& stamp) const {
  auto refuse = [](std::string why) { return CacheLookup{std::nullopt, std::move(why)}; };
  // Only a regular file is read: opening a named pipe left in the cache would block forever.
  struct stat st {};
  if (::stat(pathOf(key).c_str(), &st) != 0) return {};  // absent: a plain miss
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  std::ifstream f(pathOf(key), std::ios::binary);
  if (!f) return {};
  Header h{};
  if (!f.read(reinterpret_cast<char*>(&h), sizeof h)) return refuse("truncated header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return refuse(std::memcmp(h.magic, kOldMagic, sizeof kOldMagic) == 0 ? "stale: an older entry format"
                                                                          : "not a fusec cache entry");
  if (h.length > kMaxCubin || h.stampLength > 4096) return refuse("damaged header");
  std::string theirs(h.stampLength, '\0');
  Bytes data(h.length);
  if (!f.read(theirs.data(), std::streamsize(theirs.size())) ||
      !f.read(reinterpret_cast<char*>(data.data()), std::streamsize(h.length)))
    return refuse("truncated");
  if (f.peek() != std::char_traits<char>::eof()) return refuse("trailing bytes");
  if (checksumOf(theirs, data) != h.checksum) return refuse("checksum mismatch");
  if (theirs != stamp) return refuse("stale: built by " + theirs + ", not " + stamp);
  return {std::move(data), ""};
}

void CubinCache::store(const std::string& key, const std::string& stamp, const Bytes& cubin) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.length = cubin.size();
  h.checksum = checksumOf(stamp, cubin);
  h.stampLength = uint32_t(stamp.size());
  try {
    AtomicFile f(pathOf(key));
    f.stream().write(reinterpret_cast<const char*>(&h), sizeof h);
    f.stream().write(stamp.data(), std::streamsize(stamp.size()));
    f.stream().write(reinterpret_cast<const char*>(cubin.data()), std::streamsize(cubin.size()));
    f.commit();
  } catch (const Error&) {
    // Best effort: an unwritable cache only costs recompiles.
  }
}

}  // namespace fusec::codegen
