#include "frontend/training_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "frontend/safetensors.h"
#include "support/atomic_file.h"

namespace fusec {

namespace {

namespace fs = std::filesystem;

// Metadata keys. The format version changes when what a checkpoint holds does.
constexpr const char* kFormat = "fusec_checkpoint";
constexpr const char* kVersion = "2";  // 2: a checksum of everything (kChecksum)
constexpr const char* kStep = "fusec_step";
constexpr const char* kDataState = "fusec_data_rng";
constexpr const char* kRunPrefix = "run ";  // "run --dtype" -> "bf16"
constexpr const char* kLoss = "loss";
constexpr const char* kChecksum = "fusec_checksum";

}  // namespace

std::string checkpointPath(const std::string& dir) { return (fs::path(dir) / "checkpoint.safetensors").string(); }

namespace {

void createDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("--checkpoint " + dir + ": cannot create the directory (" + ec.message() + ")");
}

// ".checkpoint.safetensors.tmp.PID.N" files of writers no longer running.
void removeStaleTemporaries(const std::string& dir) {
  const std::string prefix = "." + fs::path(checkpointPath(dir)).filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    long pid = 0;
    auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (err != std::errc() || end == rest.data() || pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) == -1 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

}  // namespace

void requireCheckpointDir(const std::string& dir) {
  createDir(dir);
  try {
    writeFileAtomically((fs::path(dir) / ".fusec-write-test").string(), "");
  } catch (const Error& e) {
    throw Error("--checkpoint " + dir + ": cannot write there (" + e.what() + ")");
  }
  std::error_code ec;
  fs::remove(fs::path(dir) / ".fusec-write-test", ec);
}

namespace {

// FNV-1a, 64 bits: a checksum of the whole checkpoint (every tensor's name, type and values,
// and every metadata entry but itself), so that a damaged byte anywhere is refused at resume
// instead of silently changing the run.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    for (size_t k = 0; k < n; ++k) h = (h ^ static_cast<const unsigned char*>(p)[k]) * 1099511628211ull;
  }
  void text(const std::string& s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
};

std::string checksumOf(const Bindings& tensors, const SafetensorsMetadata& meta) {
  Fnv f;
  for (const auto& [name, t] : tensors) {  // std::map: name order
    f.text(name);
    f.text(t.type.str());
    if (!t.f.empty()) f.bytes(t.f.data(), t.f.size() * sizeof(float));
    if (!t.i.empty()) f.bytes(t.i.data(), t.i.size() * sizeof(int64_t));
  }
  for (const auto& [key, value] : meta)
    if (key != kChecksum) {
      f.text(key);
      f.text(value);
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return hex;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".fusec-lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("--checkpoint " + dir + ": cannot lock (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw Error("--checkpoint " + dir + ": another fusec run is writing checkpoints there");
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

void saveCheckpoint(const std::string& dir, TrainingCheckpoint c) {
  if (int64_t(c.losses.size()) != c.step)
    throw Error("internal: a checkpoint at step " + std::to_string(c.step) + " with " + std::to_string(c.losses.size()) +
                " losses");
  createDir(dir);
  removeStaleTemporaries(dir);
  SafetensorsMetadata meta{{"format", "pt"}, {kFormat, kVersion}, {kStep, std::to_string(c.step)}};
  if (!c.dataState.empty()) meta[kDataState] = c.dataState;
  for (const auto& [flag, value] : c.run) meta[kRunPrefix + flag] = value;
  Bindings tensors = std::move(c.state);
  if (tensors.count(kLoss)) throw Error("internal: a checkpoint's state holds a tensor named 'loss'");
  HostTensor loss = HostTensor::zeros(Type{DType::f32, {c.step}});
  loss.f = std::move(c.losses);
  tensors[kLoss] = std::move(loss);
  meta[kChecksum] = checksumOf(tensors, meta);
  saveSafetensors(checkpointPath(dir), tensors, meta);
}

namespace {

// The checks on a read safetensors file's tensors and metadata (file or bytes alike).
TrainingCheckpoint checkpointOf(Bindings tensors, const SafetensorsMetadata& meta, const std::string& path) {
  TrainingCheckpoint c;
  c.state = std::move(tensors);
  auto bad = [&](const std::string& why) { return Error(path + ": not a fusec training checkpoint (" + why + ")"); };
  auto format = meta.find(kFormat);
  if (format == meta.end()) throw bad("no '" + std::string(kFormat) + "' metadata");
  if (format->second != kVersion)
    throw Error(path + ": a checkpoint of format " + format->second + ", this fusec reads format " + kVersion);
  auto step = meta.find(kStep);
  if (step == meta.end()) throw bad("no step count");
  const std::string& s = step->second;
  auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), c.step);
  if (err != std::errc() || end != s.data() + s.size() || c.step < 1) throw bad("step count '" + s + "'");
  auto loss = c.state.find(kLoss);
  if (loss == c.state.end()) throw bad("no 'loss' tensor");
  if (loss->second.type != Type{DType::f32, {c.step}})
    throw bad("'loss' is " + loss->second.type.str() + " at step " + std::to_string(c.step) + ", expected f32[" +
              std::to_string(c.step) + "]");
  auto sum = meta.find(kChecksum);
  if (sum == meta.end()) throw bad("no checksum");
  if (sum->second != checksumOf(c.state, meta))
    throw Error(path + ": damaged: its checksum does not match its contents (the file changed after it was written)");
  c.losses = std::move(loss->second.f);
  c.state.erase(loss);
  if (auto d = meta.find(kDataState); d != meta.end()) c.dataState = d->second;
  const std::string prefix = kRunPrefix;
  for (const auto& [key, value] : meta)
    if (key.starts_with(prefix)) c.run[key.substr(prefix.size())] = value;
  return c;
}

}  // namespace

TrainingCheckpoint loadCheckpoint(const std::string& dir) {
  const std::string path = checkpointPath(dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("--resume " + dir + ": no checkpoint there (" + path + " does not exist)");
  SafetensorsMetadata meta;
  Bindings tensors = loadSafetensors(path, &meta);
  return checkpointOf(std::move(tensors), meta, path);
}

TrainingCheckpoint parseCheckpoint(std::string_view bytes, const std::string& path) {
  SafetensorsMetadata meta;
  Bindings tensors = parseSafetensors(bytes, path, &meta);
  return checkpointOf(std::move(tensors), meta, path);
}


void requireSameRun(const TrainingCheckpoint& c, const RunIdentity& run, const std::string& dir) {
  auto shown = [](const std::string& flag, const std::string& value) {
    return value.empty() ? "no " + flag : flag + " " + value;
  };
  for (const auto& [flag, value] : run) {
    auto it = c.run.find(flag);
    const std::string theirs = it == c.run.end() ? "" : it->second;
    if (theirs != value)
      throw Error("--resume " + dir + ": the checkpoint's run had " + shown(flag, theirs) + ", this run has " +
                  shown(flag, value) + " (a resumed run takes the flags of the run it continues)");
  }
  for (const auto& [flag, value] : c.run)
    if (!run.count(flag))
      throw Error("--resume " + dir + ": the checkpoint's run had " + shown(flag, value) + ", which this run lacks");
}

}  // namespace fusec
