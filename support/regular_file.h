// Reading files that the user names: only regular files. Opening a named pipe for reading
// blocks until someone writes to it, and a directory or a device is never what a weights file,
// a token file or a program means, so every reader goes through here: open without blocking,
// check the kind, and only then read. Errors are one line naming the file.
#pragma once
#include <cstdint>
#include <string>

namespace fusec {

// An open read-only descriptor of the regular file `path` (blocking reads). Throws Error
// "cannot open 'PATH': why" or "cannot read 'PATH': not a regular file (a named pipe)".
int openRegularFile(const std::string& path);

// The whole of the regular file `path`.
std::string readRegularFile(const std::string& path);

// Reads exactly `n` bytes at `offset` of `fd`; false when the file ends first (it shrank).
// Throws Error naming `path` on a read error.
bool readAt(int fd, uint64_t offset, void* dst, size_t n, const std::string& path);

}  // namespace fusec
