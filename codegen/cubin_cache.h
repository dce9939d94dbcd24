// The on-disk cubin cache: $XDG_CACHE_HOME/fusec (fallback ~/.cache/fusec), one file per
// key. The key hashes everything that decides the cubin (source, options, NVRTC version,
// arch), so an entry is never stale, only absent or corrupt. Entries are written to a
// temporary file and renamed into place (readers never see a half-written file, concurrent
// writers of one key both write the same bytes); each carries a header with a magic,
// the payload length and a checksum, so a truncated or damaged entry reads as a miss and is
// rebuilt.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fusec::codegen {

using Bytes = std::vector<uint8_t>;

class CubinCache {
 public:
  explicit CubinCache(std::string dir);
  static std::string defaultDir();  // $XDG_CACHE_HOME/fusec or $HOME/.cache/fusec

  static std::string key(const std::string& source, const std::string& options, const std::string& nvrtcVersion,
                         const std::string& arch);
  std::string pathOf(const std::string& key) const;
  std::optional<Bytes> load(const std::string& key) const;  // nullopt: absent or corrupt
  // Best effort: a cache that cannot be written only costs recompiles.
  void store(const std::string& key, const Bytes& cubin) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace fusec::codegen
