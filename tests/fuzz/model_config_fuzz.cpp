// Fuzz target: the model sizes the CLI takes (--vocab, --d-model, --layers, --heads, --d-ff,
// --context-length, --rope-theta) and the shape a command traces (--batch, --ctx), as any
// int64 and double values. A configuration must either be refused with one line
// (fusec::Error: models::validate, the trace's shape checks) or give consistent sizes: the
// parameter count, and (kept small enough to trace quickly) a training step whose params are
// the model's weights. Overflowing element counts were a crash and silently wrong statistics
// (issue 39); this keeps them a refusal.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "frontend/models/transformer.h"
#include "ir/error.h"
#include "ir/graph.h"

namespace {

// Reads the next 8 bytes (zeros past the end) as an int64; its first byte picks how the value
// is drawn, so that small sizes, powers of two near the overflow and negatives all come up.
int64_t nextInt(const uint8_t*& p, const uint8_t* end) {
  uint8_t raw[8] = {};
  for (int i = 0; i < 8 && p < end; ++i) raw[i] = *p++;
  uint64_t v;
  std::memcpy(&v, raw, 8);
  switch (raw[0] % 4) {
    case 0: return int64_t(v >> 8) % 97;                        // small, the common case
    case 1: return int64_t(1) << (raw[1] % 63);                 // a power of two, up to 2^62
    case 2: return -int64_t(v >> 9);                            // negative
    default: return int64_t(v >> 1);                            // anything
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  fusec::models::ModelConfig c;
  c.vocab = nextInt(p, end);
  c.dModel = nextInt(p, end);
  c.layers = nextInt(p, end);
  c.heads = nextInt(p, end);
  c.dFF = nextInt(p, end);
  c.ctx = nextInt(p, end);
  const int64_t batch = nextInt(p, end), seq = nextInt(p, end);
  if (p < end) c.ropeTheta = double(nextInt(p, end)) / 16.0;
  try {
    fusec::models::validate(c);
  } catch (const fusec::Error& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
    return 0;
  }
  // Valid: the parameter count is the sum of the weights' element counts, each within the limit.
  int64_t total = 0;
  for (const auto& w : fusec::models::parameterSpecs(c)) {
    int64_t n = 1;
    for (int64_t d : w.shape) {
      if (d <= 0 || n > fusec::kMaxElements / d) {
        n = -1;
        break;
      }
      n *= d;
    }
    if (n <= 0 || total > fusec::kMaxElements - n) {
      std::fprintf(stderr, "model_config fuzz: a validated model's weights overflow\n");
      std::abort();
    }
    total += n;
  }
  if (total != fusec::models::parameterCount(c)) {
    std::fprintf(stderr, "model_config fuzz: parameterCount disagrees with the weights\n");
    std::abort();
  }
  // Small enough to trace in a moment: the training step must trace or refuse its shape.
  if (c.layers > 2 || c.dModel > 256 || c.dFF > 1024 || c.vocab > 4096 || batch > 8 || seq > 64) return 0;
  try {
    fusec::Module m;
    fusec::Graph& g = fusec::models::buildTrainStep(m, c, batch, seq, fusec::models::AdamWConfig{});
    size_t params = 0;
    for (const auto& op : g.ops) params += op->kind == fusec::OpKind::Param;
    if (params < fusec::models::parameterSpecs(c).size()) {
      std::fprintf(stderr, "model_config fuzz: the traced step lacks weights\n");
      std::abort();
    }
  } catch (const fusec::Error& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
  }
  return 0;
}
