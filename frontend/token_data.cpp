#include "frontend/token_data.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/error.h"

namespace fusec {

TokenDType parseTokenDType(const std::string& name) {
  if (name == "uint16") return TokenDType::U16;
  if (name == "int32") return TokenDType::I32;
  throw Error("unknown token dtype '" + name + "' (known: uint16, int32)");
}

TokenFile::TokenFile(const std::string& path, TokenDType dtype) : path_(path), dtype_(dtype) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  const size_t width = dtype == TokenDType::U16 ? 2 : 4;
  bytes_ = size_t(st.st_size);
  if (bytes_ % width != 0) {
    ::close(fd);
    throw Error(path + ": " + std::to_string(bytes_) + " bytes is not a whole number of " +
                (width == 2 ? "uint16" : "int32") + " tokens (--data-dtype?)");
  }
  count_ = int64_t(bytes_ / width);
  if (bytes_ > 0) {
    map_ = mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(path + ": cannot map (" + why + ")");
    }
  }
  ::close(fd);
}

TokenFile::~TokenFile() {
  if (map_) munmap(map_, bytes_);
}

int64_t TokenFile::at(int64_t i) const {
  if (dtype_ == TokenDType::U16) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(map_) + size_t(i) * 2, 2);
    return v;
  }
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(map_) + size_t(i) * 4, 4);
  return v;
}

Bindings TokenFile::sample(int64_t batch, int64_t ctx, std::mt19937_64& rng) const {
  if (count_ < ctx + 1)
    throw Error(path_ + " holds " + std::to_string(count_) + " tokens, fewer than --ctx + 1 = " + std::to_string(ctx + 1));
  std::uniform_int_distribution<int64_t> start(0, count_ - ctx - 1);
  HostTensor ids = HostTensor::zeros(Type{DType::i64, {batch, ctx}});
  HostTensor targets = HostTensor::zeros(Type{DType::i64, {batch, ctx}});
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = start(rng);
    for (int64_t t = 0; t <= ctx; ++t) {
      const int64_t v = at(s + t);
      if (t < ctx) ids.i[size_t(b * ctx + t)] = v;
      if (t > 0) targets.i[size_t(b * ctx + t - 1)] = v;
    }
  }
  return {{"ids", std::move(ids)}, {"targets", std::move(targets)}};
}

}  // namespace fusec
