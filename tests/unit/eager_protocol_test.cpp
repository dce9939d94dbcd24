// fusec <-> fusec-eager (bench/eager_protocol.h): a case survives the trip through the worker's
// arguments field by field, the answers parse back, and every malformed call or answer is an
// Error that names what is wrong.
#include <gtest/gtest.h>

#include "bench/eager_protocol.h"
#include "frontend/models/transformer.h"

namespace fusec::bench {
namespace {

BenchCase odd() {
  models::ModelConfig m = models::namedConfig("small");
  m.ropeTheta = 12345.678901234567, m.eps = 1e-6 / 3;  // not exact in decimal at %g
  BenchCase c;
  c.model = zooBenchModel(m);
  c.batch = 3, c.seq = 17, c.dtype = DType::bf16, c.pass = BenchPass::Step, c.warmup = 2, c.iters = 7;
  c.adamw.lr = 3e-4 / 7, c.adamw.beta1 = 0.85, c.adamw.beta2 = 0.97, c.adamw.eps = 1e-7, c.adamw.weightDecay = 0.1;
  return c;
}

TEST(EagerProtocol, ModelCaseRoundTripsExactly) {
  const BenchCase c = odd();
  const EagerModelCase back = parseEagerModelArgs(eagerModelArgs(c, 42));
  ASSERT_TRUE(back.c.model.zoo);
  const models::ModelConfig &a = *c.model.zoo, &b = *back.c.model.zoo;
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.vocab, a.vocab);
  EXPECT_EQ(b.ctx, a.ctx);
  EXPECT_EQ(b.dModel, a.dModel);
  EXPECT_EQ(b.layers, a.layers);
  EXPECT_EQ(b.heads, a.heads);
  EXPECT_EQ(b.dFF, a.dFF);
  EXPECT_EQ(b.ropeTheta, a.ropeTheta);  // bit for bit
  EXPECT_EQ(b.eps, a.eps);
  EXPECT_EQ(back.c.batch, 3);
  EXPECT_EQ(back.c.seq, 17);
  EXPECT_EQ(back.c.dtype, DType::bf16);
  EXPECT_EQ(back.c.pass, BenchPass::Step);
  EXPECT_EQ(back.c.warmup, 2);
  EXPECT_EQ(back.c.iters, 7);
  EXPECT_EQ(back.c.adamw.lr, c.adamw.lr);
  EXPECT_EQ(back.c.adamw.beta1, c.adamw.beta1);
  EXPECT_EQ(back.c.adamw.beta2, c.adamw.beta2);
  EXPECT_EQ(back.c.adamw.eps, c.adamw.eps);
  EXPECT_EQ(back.c.adamw.weightDecay, c.adamw.weightDecay);
  EXPECT_EQ(back.seed, 42u);
}

TEST(EagerProtocol, AttentionCaseRoundTrips) {
  AttentionCase c;
  c.batch = 2, c.d = 48, c.seq = 333, c.dtype = "bf16", c.warmup = 1, c.iters = 4;
  const AttentionCase b = parseEagerAttentionArgs(eagerAttentionArgs(c));
  EXPECT_EQ(b.batch, 2);
  EXPECT_EQ(b.d, 48);
  EXPECT_EQ(b.seq, 333);
  EXPECT_EQ(b.dtype, "bf16");
  EXPECT_EQ(b.warmup, 1);
  EXPECT_EQ(b.iters, 4);
}

// `args` with the value of `key` replaced (or the pair dropped when value is null).
std::vector<std::string> with(std::vector<std::string> args, const std::string& key, const char* value) {
  for (size_t i = 0; i < args.size(); i += 2)
    if (args[i] == "--" + key) {
      if (value) args[i + 1] = value;
      else args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
      return args;
    }
  ADD_FAILURE() << "no --" << key;
  return args;
}

void expectError(const std::vector<std::string>& args, const std::string& part) {
  try {
    parseEagerModelArgs(args);
    ADD_FAILURE() << "accepted; expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(EagerProtocol, MalformedCallsAreErrorsNamingTheKey) {
  const auto good = eagerModelArgs(odd(), 1);
  expectError(with(good, "batch", nullptr), "missing --batch");
  expectError(with(good, "batch", "4x"), "--batch '4x' is not an integer");
  expectError(with(good, "lr", "fast"), "--lr 'fast' is not a number");
  expectError(with(good, "dtype", "fp8"), "unknown dtype 'fp8'");
  expectError(with(good, "pass", "sideways"), "sideways");
  expectError(with(good, "ctx", "4096"), "out of range");  // small's context is 1024
  expectError(with(good, "heads", "5"), "");                // 768 % 5: validate refuses it
  auto twice = good;
  twice.insert(twice.end(), {"--batch", "2"});
  expectError(twice, "--batch given twice");
  auto unknown = good;
  unknown.insert(unknown.end(), {"--colour", "blue"});
  expectError(unknown, "unknown key --colour");
  auto odd = good;
  odd.pop_back();
  expectError(odd, "pairs");
}

TEST(EagerProtocol, AnImportedModelHasNoEagerLibTorchRow) {
  BenchCase c = odd();
  c.model.zoo.reset();
  EXPECT_THROW(eagerModelArgs(c, 0), Error);
}

TEST(EagerProtocol, AnswersRoundTripAndErrorsCarryTheWorkersMessage) {
  TimedRun r;
  r.ms = {1.25, 0.1 + 0.2, 3.0};
  r.allocatedBytes = int64_t(1) << 40;
  const TimedRun back = parseTimedRunJson(timedRunJson(r));
  EXPECT_EQ(back.ms, r.ms);
  EXPECT_EQ(back.allocatedBytes, r.allocatedBytes);
  EXPECT_FALSE(back.reservedBytes);

  AttentionRun a;
  a.forwardMs = {0.5}, a.backwardMs = {1.5, 2.5}, a.peakBytes = 123;
  const AttentionRun ab = parseAttentionRunJson(attentionRunJson(a));
  EXPECT_EQ(ab.forwardMs, a.forwardMs);
  EXPECT_EQ(ab.backwardMs, a.backwardMs);
  EXPECT_FALSE(ab.savedBytes);
  EXPECT_EQ(ab.peakBytes, 123);

  try {
    parseTimedRunJson(eagerErrorJson("CUDA out of memory. Tried to allocate 2.00 GiB"));
    ADD_FAILURE() << "an error answer parsed";
  } catch (const Error& e) {
    EXPECT_EQ(statusFromError(e.what()), "OOM");
  }
  EXPECT_THROW(parseTimedRunJson("Segmentation fault"), Error);
  EXPECT_THROW(parseTimedRunJson("[1, 2]"), Error);
  EXPECT_THROW(parseTimedRunJson(R"({"ms": []})"), Error);
  EXPECT_THROW(parseTimedRunJson(R"({"ms": "fast"})"), Error);
  EXPECT_THROW(parseAttentionRunJson(R"({"forward_ms": [1]})"), Error);
}

}  // namespace
}  // namespace fusec::bench
