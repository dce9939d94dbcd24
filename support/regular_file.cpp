#include "support/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ir/error.h"

namespace fusec {
namespace {

const char* kindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a named pipe";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a plain file";
}

}  // namespace

int openRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string what = std::string("not a regular file (") + kindOf(st.st_mode) + ")";
    ::close(fd);
    throw Error("cannot read '" + path + "': " + what);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool readAt(int fd, uint64_t offset, void* dst, size_t n, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t k = ::pread(fd, p, n, off_t(offset));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) throw Error(path + ": read error (" + std::strerror(errno) + ")");
    if (k == 0) return false;
    p += k;
    n -= size_t(k);
    offset += uint64_t(k);
  }
  return true;
}

std::string readRegularFile(const std::string& path) {
  const int fd = openRegularFile(path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(path + ": read error (" + why + ")");
    }
    if (k == 0) break;
    out.append(buf, size_t(k));
  }
  ::close(fd);
  return out;
}

}  // namespace fusec
