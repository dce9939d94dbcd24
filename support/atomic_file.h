// Every file fusec writes (--out, -o, --init-weights, IR dumps, emitted kernels, cache
// entries) is written here: to a temporary file in the same directory, then renamed over
// the destination. A run that fails or is killed part-way leaves the previous file as it
// was (or no file), never a truncated one; a reader never sees half a file. A killed run
// can leave its temporary behind (".NAME.tmp.PID.N", hidden, beside the destination).
#pragma once
#include <fstream>
#include <string>
#include <string_view>

namespace fusec {

class AtomicFile {
 public:
  // Opens the temporary; Error "cannot write 'PATH': reason" when it cannot be created.
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // not committed: the temporary is removed, the destination untouched

  std::ostream& stream() { return out_; }
  // Flushes, syncs to disk and renames over the destination; Error on any failure (a full
  // disk, a directory that went away), after which the destination is still the old file.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temporaryPath() const { return tmp_; }

 private:
  std::string path_, tmp_;
  std::ofstream out_;
  bool committed_ = false;
  bool direct_ = false;  // a device or pipe, written in place
};

// The whole file at once.
void writeFileAtomically(const std::string& path, std::string_view bytes);

// Before long work whose result goes to `path` (`flag` names it in the message): Error
// "FLAG PATH: ..." (one line) when it could not be written then: a directory, a missing
// directory, or one where no file can be created. A device or pipe (/dev/null) passes.
void requireWritableFile(const std::string& path, const std::string& flag);

}  // namespace fusec
