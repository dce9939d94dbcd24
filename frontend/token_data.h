// Training batches from a flat token file, the format CS336 trains from: the tokens of a
// corpus one after another, uint16 (np.memmap(..., dtype=np.uint16)) or int32, native
// (little-endian) order, no header. Windows are read as they are drawn (pread), not mapped: a
// corpus of gigabytes costs only the windows, and a file that shrinks while a run reads it is
// one line (a mapped file would end the process with SIGBUS).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "ir/host_tensor.h"

namespace fusec {

enum class TokenDType { U16, I32 };
// "uint16" or "int32"; throws Error otherwise.
TokenDType parseTokenDType(const std::string& name);

class TokenFile {
 public:
  // Throws Error (one line, naming the file) when it cannot be opened or is not a regular
  // file (a named pipe would block), or its size is not a whole number of tokens.
  TokenFile(const std::string& path, TokenDType dtype);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  const std::string& path() const { return path_; }
  int64_t at(int64_t i) const;
  // Tokens [first, first + n) into `out`. Throws Error when the file has shrunk past them.
  void read(int64_t first, int64_t n, int64_t* out) const;

  // CS336's get_batch: `batch` windows at start offsets drawn uniformly from [0, size - ctx - 1]
  // by `rng`; "ids" [batch, ctx] is a window, "targets" the same window one token later, both
  // i64. Throws Error when the file holds fewer than ctx + 1 tokens. Whether the tokens fit
  // the model's vocabulary is the model's check (Model::validateInputs).
  Bindings sample(int64_t batch, int64_t ctx, std::mt19937_64& rng) const;

 private:
  std::string path_;
  TokenDType dtype_;
  int64_t count_ = 0;
  size_t bytes_ = 0;
  int fd_ = -1;
};

}  // namespace fusec
