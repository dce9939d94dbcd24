#include "frontend/token_data.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "ir/error.h"
#include "support/regular_file.h"

namespace fusec {

TokenDType parseTokenDType(const std::string& name) {
  if (name == "uint16") return TokenDType::U16;
  if (name == "int32") return TokenDType::I32;
  throw Error("unknown token dtype '" + name + "' (known: uint16, int32)");
}

TokenFile::TokenFile(const std::string& path, TokenDType dtype) : path_(path), dtype_(dtype) {
  fd_ = openRegularFile(path);
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    ::close(fd_);
    throw Error(path + ": cannot stat (" + std::strerror(errno) + ")");
  }
  const size_t width = dtype == TokenDType::U16 ? 2 : 4;
  bytes_ = size_t(st.st_size);
  if (bytes_ % width != 0) {
    ::close(fd_);
    throw Error(path + ": " + std::to_string(bytes_) + " bytes is not a whole number of " +
                (width == 2 ? "uint16" : "int32") + " tokens (--data-dtype?)");
  }
  count_ = int64_t(bytes_ / width);
}

TokenFile::~TokenFile() { ::close(fd_); }

void TokenFile::read(int64_t first, int64_t n, int64_t* out) const {
  const size_t width = dtype_ == TokenDType::U16 ? 2 : 4;
  std::vector<char> raw(size_t(n) * width);
  if (!readAt(fd_, uint64_t(first) * width, raw.data(), raw.size(), path_)) {
    struct stat st {};
    const int64_t now = fstat(fd_, &st) == 0 ? int64_t(st.st_size) / int64_t(width) : -1;
    throw Error(path_ + ": the file shrank while in use (" + std::to_string(count_) + " tokens when opened, " +
                std::to_string(now) + " now)");
  }
  for (int64_t k = 0; k < n; ++k) {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, raw.data() + size_t(k) * 2, 2);
      out[k] = v;
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + size_t(k) * 4, 4);
      out[k] = v;
    }
  }
}

int64_t TokenFile::at(int64_t i) const {
  int64_t v = 0;
  read(i, 1, &v);
  return v;
}

Bindings TokenFile::sample(int64_t batch, int64_t ctx, std::mt19937_64& rng) const {
  if (count_ < ctx + 1)
    throw Error(path_ + " holds " + std::to_string(count_) + " tokens, fewer than --ctx + 1 = " + std::to_string(ctx + 1));
  std::uniform_int_distribution<int64_t> start(0, count_ - ctx - 1);
  HostTensor ids = HostTensor::zeros(Type{DType::i64, {batch, ctx}});
  HostTensor targets = HostTensor::zeros(Type{DType::i64, {batch, ctx}});
  std::vector<int64_t> window(size_t(ctx + 1));
  for (int64_t b = 0; b < batch; ++b) {
    read(start(rng), ctx + 1, window.data());
    std::copy(window.begin(), window.end() - 1, ids.i.begin() + std::ptrdiff_t(b * ctx));
    std::copy(window.begin() + 1, window.end(), targets.i.begin() + std::ptrdiff_t(b * ctx));
  }
  return {{"ids", std::move(ids)}, {"targets", std::move(targets)}};
}

}  // namespace fusec
