// Fuzz target: damaged training checkpoints. The input is a list of byte flips (each 5 bytes:
// a little-endian offset, taken modulo the file's size, and a mask XORed into that byte)
// applied to one valid checkpoint; the damaged file must either be refused with one line
// (fusec::Error, no newline) or read back to exactly the checkpoint that was written: a resume
// from it then continues the same run. Anything else (another exception, a crash, a
// checkpoint that loads with other contents) aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>

#include "frontend/training_checkpoint.h"
#include "ir/error.h"

namespace {

using fusec::TrainingCheckpoint;

// A checkpoint as `fusec run` writes one: weights and moments of a few shapes, the losses,
// a run identity and a sampler state (the text of a std::mt19937_64).
TrainingCheckpoint original() {
  TrainingCheckpoint c;
  c.step = 3;
  c.losses = {4.25f, 4.0f, 3.875f};
  auto tensor = [](fusec::Shape shape, float seed) {
    fusec::HostTensor t = fusec::HostTensor::zeros(fusec::Type{fusec::DType::f32, shape});
    for (size_t i = 0; i < t.f.size(); ++i) t.f[i] = seed * float(i % 7) - 0.5f * float(i % 3);
    return t;
  };
  c.state["layers.0.attn.q_proj.weight"] = tensor({8, 8}, 0.25f);
  c.state["layers.0.attn.q_proj.weight.exp_avg"] = tensor({8, 8}, 0.001f);
  c.state["layers.0.attn.q_proj.weight.exp_avg_sq"] = tensor({8, 8}, 1e-6f);
  c.state["ln_final.weight"] = tensor({8}, 1.0f);
  c.run = {{"--dtype", "fp32"}, {"--model", "tiny"}, {"--seed", "7"}, {"--batch", "4"}};
  std::mt19937_64 rng(5);
  rng.discard(17);
  std::ostringstream state;
  state << rng;
  c.dataState = state.str();
  return c;
}

struct Good {
  std::string bytes;
  TrainingCheckpoint loaded;
};

const Good& good() {
  static const Good g = [] {
    const std::string dir = std::filesystem::temp_directory_path() / ("fusec_checkpoint_fuzz." + std::to_string(getpid()));
    fusec::saveCheckpoint(dir, original());
    Good out;
    std::ifstream in(fusec::checkpointPath(dir), std::ios::binary);
    out.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    out.loaded = fusec::parseCheckpoint(out.bytes, "checkpoint.safetensors");
    return out;
  }();
  return g;
}

bool same(const TrainingCheckpoint& a, const TrainingCheckpoint& b) {
  if (a.step != b.step || a.losses != b.losses || a.run != b.run || a.dataState != b.dataState) return false;
  if (a.state.size() != b.state.size()) return false;
  for (const auto& [name, t] : a.state) {
    auto it = b.state.find(name);
    if (it == b.state.end() || it->second.type != t.type || it->second.f != t.f) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Good& g = good();
  std::string damaged = g.bytes;
  for (size_t k = 0; k + 5 <= size; k += 5) {
    const uint32_t at = uint32_t(data[k]) | uint32_t(data[k + 1]) << 8 | uint32_t(data[k + 2]) << 16 | uint32_t(data[k + 3]) << 24;
    damaged[at % damaged.size()] = char(uint8_t(damaged[at % damaged.size()]) ^ data[k + 4]);
  }
  try {
    const TrainingCheckpoint c = fusec::parseCheckpoint(damaged, "checkpoint.safetensors");
    if (!same(c, g.loaded)) {
      std::fprintf(stderr, "checkpoint fuzz: a damaged checkpoint loaded with other contents\n");
      std::abort();
    }
  } catch (const fusec::Error& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) {
      std::fprintf(stderr, "checkpoint fuzz: a refusal of more than one line: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
