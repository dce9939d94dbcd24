#include "support/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

#include "ir/error.h"

namespace fusec {

namespace {

std::string temporaryBeside(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path);
  std::string name = "." + p.filename().string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  return (p.parent_path() / name).string();
}

// fsync through a descriptor of its own: the ofstream has no descriptor to offer, and
// Linux syncs the file's pages whichever descriptor asks.
bool syncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: a file system without fsync
  ::close(fd);
  return ok;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("cannot write '': empty file name");
  // A device or pipe (/dev/null, /dev/stdout, a fifo) is written in place: there is no
  // previous content to keep, and a rename would replace the device node itself.
  std::error_code ec;
  const auto st = std::filesystem::status(path_, ec);
  direct_ = !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
  tmp_ = direct_ ? path_ : temporaryBeside(path_);
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (committed_ || direct_) return;
  out_.close();
  std::remove(tmp_.c_str());
}

void AtomicFile::commit() {
  out_.flush();
  const bool written = bool(out_);
  const int err = errno;
  out_.close();
  if (!written || out_.fail()) throw Error("cannot write '" + path_ + "': " + std::strerror(err ? err : EIO));
  if (direct_) {
    committed_ = true;
    return;
  }
  if (!syncPath(tmp_, O_RDONLY)) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
  committed_ = true;
  // The rename itself reaches the disk with its directory.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  syncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

void writeFileAtomically(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.stream().write(bytes.data(), std::streamsize(bytes.size()));
  f.commit();
}

void requireWritableFile(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::is_directory(st)) throw Error(flag + " " + path + ": is a directory");
  if (!ec && fs::exists(st) && !fs::is_regular_file(st)) return;  // a device or pipe: written in place
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(dir, ec)) throw Error(flag + " " + path + ": no directory " + dir.string());
  // Proves a file can be made there, as the final write will (a temporary, then a rename).
  const fs::path probe = dir / (".fusec-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(flag + " " + path + ": cannot write there (" + std::strerror(errno) + ")");
  ::close(fd);
  fs::remove(probe, ec);
}

}  // namespace fusec
