// The on-disk cubin cache: $XDG_CACHE_HOME/fusec (fallback ~/.cache/fusec), one file per
// key. The key hashes everything that decides the cubin (source, options, NVRTC version,
// arch). Entries are written atomically (support/atomic_file.h: readers never see a
// half-written file; two processes writing one key both write the same bytes and the last
// rename wins). Each entry carries a header: a magic, the payload length, a checksum, and a
// stamp that names what built it (fusec's version, NVRTC's, the arch). A truncated, damaged
// or stale entry (another stamp, an older format) reads as a miss with the reason, so the
// compiler warns in one line, rebuilds it and writes it again.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fusec::codegen {

using Bytes = std::vector<uint8_t>;

struct CacheLookup {
  std::optional<Bytes> cubin;  // a hit
  std::string problem;         // a miss with an entry present: why it was refused
};

class CubinCache {
 public:
  explicit CubinCache(std::string dir);
  static std::string defaultDir();  // $XDG_CACHE_HOME/fusec or $HOME/.cache/fusec

  static std::string key(const std::string& source, const std::string& options, const std::string& nvrtcVersion,
                         const std::string& arch);
  // What an entry records about its builder: "fusec 0.1.0, nvrtc 13.0, sm_90".
  static std::string stamp(const std::string& nvrtcVersion, const std::string& arch);
  std::string pathOf(const std::string& key) const;
  // The entry of `key` if it is whole and was built under `stamp`.
  CacheLookup load(const std::string& key, const std::string& stamp) const;
  // Best effort: a cache that cannot be written only costs recompiles.
  void store(const std::string& key, const std::string& stamp, const Bytes& cubin) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace fusec::codegen
