#include "bench/eager_protocol.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/sweep.h"

namespace fusec::bench {

namespace {

using Args = std::vector<std::string>;

// Shortest text that reads back as the same double.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void put(Args& a, const std::string& key, const std::string& value) {
  a.push_back("--" + key);
  a.push_back(value);
}

// `--key value` pairs, each key once and every key one of `known`.
class KeyValues {
 public:
  KeyValues(const Args& args, const std::vector<std::string>& known) {
    if (args.size() % 2) throw Error("arguments come in --key value pairs");
    for (size_t i = 0; i < args.size(); i += 2) {
      const std::string& k = args[i];
      if (k.size() < 3 || k.compare(0, 2, "--") != 0) throw Error("expected --key, got '" + k + "'");
      const std::string key = k.substr(2);
      if (std::find(known.begin(), known.end(), key) == known.end()) throw Error("unknown key --" + key);
      if (!values_.emplace(key, args[i + 1]).second) throw Error("--" + key + " given twice");
    }
    for (const auto& key : known)
      if (!values_.count(key)) throw Error("missing --" + key);
  }
  const std::string& text(const std::string& key) const { return values_.at(key); }
  int64_t integer(const std::string& key) const {
    return number<int64_t>(key, "an integer", [](const std::string& s, size_t* used) { return std::stoll(s, used); });
  }
  double real(const std::string& key) const {
    return number<double>(key, "a number", [](const std::string& s, size_t* used) { return std::stod(s, used); });
  }

 private:
  // The whole value read by `parse` (std::stoll, std::stod), else an Error naming the key.
  template <class T, class Parse>
  T number(const std::string& key, const char* what, Parse parse) const {
    const std::string& s = text(key);
    size_t used = 0;
    T v{};
    try {
      v = parse(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) throw Error("--" + key + " '" + s + "' is not " + what);
    return v;
  }
  std::map<std::string, std::string> values_;
};

const std::vector<std::string> kModelKeys = {"model", "vocab", "context", "d-model", "layers", "heads", "d-ff",
                                             "rope-theta", "norm-eps", "batch", "ctx", "dtype", "pass", "warmup",
                                             "iters", "seed", "lr", "beta1", "beta2", "adam-eps", "weight-decay"};
const std::vector<std::string> kAttentionKeys = {"batch", "d", "seq", "dtype", "warmup", "iters"};

template <class T>
std::optional<T> optionalField(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

nlohmann::json answer(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    throw Error("fusec-eager answered something that is not JSON: '" + line.substr(0, 200) + "'");
  }
  if (!j.is_object()) throw Error("fusec-eager answered something that is not a JSON object");
  if (j.contains("error")) throw Error(j["error"].get<std::string>());
  return j;
}

}  // namespace

Args eagerModelArgs(const BenchCase& c, uint64_t seed) {
  if (!c.model.zoo)
    throw Error("eager LibTorch rows are for the zoo's models; an imported model's eager rows come from its "
                "PyTorch module (--vs-torch)");
  const models::ModelConfig& m = *c.model.zoo;
  Args a;
  put(a, "model", m.name);
  put(a, "vocab", std::to_string(m.vocab));
  put(a, "context", std::to_string(m.ctx));
  put(a, "d-model", std::to_string(m.dModel));
  put(a, "layers", std::to_string(m.layers));
  put(a, "heads", std::to_string(m.heads));
  put(a, "d-ff", std::to_string(m.dFF));
  put(a, "rope-theta", exact(m.ropeTheta));
  put(a, "norm-eps", exact(m.eps));
  put(a, "batch", std::to_string(c.batch));
  put(a, "ctx", std::to_string(c.seq));
  put(a, "dtype", c.dtype == DType::bf16 ? "bf16" : "fp32");
  put(a, "pass", passName(c.pass));
  put(a, "warmup", std::to_string(c.warmup));
  put(a, "iters", std::to_string(c.iters));
  put(a, "seed", std::to_string(seed));
  put(a, "lr", exact(c.adamw.lr));
  put(a, "beta1", exact(c.adamw.beta1));
  put(a, "beta2", exact(c.adamw.beta2));
  put(a, "adam-eps", exact(c.adamw.eps));
  put(a, "weight-decay", exact(c.adamw.weightDecay));
  return a;
}

EagerModelCase parseEagerModelArgs(const Args& args) {
  const KeyValues kv(args, kModelKeys);
  models::ModelConfig m;
  m.name = kv.text("model");
  m.vocab = kv.integer("vocab"), m.ctx = kv.integer("context"), m.dModel = kv.integer("d-model");
  m.layers = kv.integer("layers"), m.heads = kv.integer("heads"), m.dFF = kv.integer("d-ff");
  m.ropeTheta = kv.real("rope-theta"), m.eps = kv.real("norm-eps");
  models::validate(m);
  EagerModelCase out;
  out.c.model = zooBenchModel(m);
  out.c.batch = kv.integer("batch"), out.c.seq = kv.integer("ctx");
  out.c.dtype = benchDType(kv.text("dtype"));
  out.c.pass = parsePass(kv.text("pass"));
  out.c.warmup = int(kv.integer("warmup")), out.c.iters = int(kv.integer("iters"));
  if (out.c.batch < 1 || out.c.seq < 1 || out.c.seq > m.ctx || out.c.warmup < 0 || out.c.iters < 1)
    throw Error("batch, ctx (at most the context length), warmup and iters out of range");
  const int64_t seed = kv.integer("seed");
  if (seed < 0) throw Error("--seed must be non-negative");
  out.seed = uint64_t(seed);
  out.c.adamw.lr = kv.real("lr"), out.c.adamw.beta1 = kv.real("beta1"), out.c.adamw.beta2 = kv.real("beta2");
  out.c.adamw.eps = kv.real("adam-eps"), out.c.adamw.weightDecay = kv.real("weight-decay");
  return out;
}

Args eagerAttentionArgs(const AttentionCase& c) {
  Args a;
  put(a, "batch", std::to_string(c.batch));
  put(a, "d", std::to_string(c.d));
  put(a, "seq", std::to_string(c.seq));
  put(a, "dtype", c.dtype);
  put(a, "warmup", std::to_string(c.warmup));
  put(a, "iters", std::to_string(c.iters));
  return a;
}

AttentionCase parseEagerAttentionArgs(const Args& args) {
  const KeyValues kv(args, kAttentionKeys);
  AttentionCase c;
  c.batch = kv.integer("batch"), c.d = kv.integer("d"), c.seq = kv.integer("seq");
  c.dtype = kv.text("dtype");
  benchDType(c.dtype);
  c.warmup = int(kv.integer("warmup")), c.iters = int(kv.integer("iters"));
  if (c.batch < 1 || c.d < 1 || c.seq < 1 || c.warmup < 0 || c.iters < 1)
    throw Error("batch, d, seq, warmup and iters out of range");
  return c;
}

std::string timedRunJson(const TimedRun& r) {
  nlohmann::json j;
  j["ms"] = r.ms;
  j["allocated_bytes"] = r.allocatedBytes ? nlohmann::json(*r.allocatedBytes) : nlohmann::json(nullptr);
  j["reserved_bytes"] = r.reservedBytes ? nlohmann::json(*r.reservedBytes) : nlohmann::json(nullptr);
  return j.dump();
}

std::string attentionRunJson(const AttentionRun& r) {
  nlohmann::json j;
  j["forward_ms"] = r.forwardMs;
  j["backward_ms"] = r.backwardMs;
  j["saved_bytes"] = r.savedBytes ? nlohmann::json(*r.savedBytes) : nlohmann::json(nullptr);
  j["peak_bytes"] = r.peakBytes ? nlohmann::json(*r.peakBytes) : nlohmann::json(nullptr);
  return j.dump();
}

std::string eagerErrorJson(const std::string& message) { return nlohmann::json{{"error", message}}.dump(); }

TimedRun parseTimedRunJson(const std::string& line) {
  const nlohmann::json j = answer(line);
  TimedRun r;
  try {
    r.ms = j.at("ms").get<std::vector<double>>();
    r.allocatedBytes = optionalField<int64_t>(j, "allocated_bytes");
    r.reservedBytes = optionalField<int64_t>(j, "reserved_bytes");
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("fusec-eager's answer is malformed: ") + e.what());
  }
  if (r.ms.empty()) throw Error("fusec-eager's answer has no times");
  return r;
}

AttentionRun parseAttentionRunJson(const std::string& line) {
  const nlohmann::json j = answer(line);
  AttentionRun r;
  try {
    r.forwardMs = j.at("forward_ms").get<std::vector<double>>();
    r.backwardMs = j.at("backward_ms").get<std::vector<double>>();
    r.savedBytes = optionalField<int64_t>(j, "saved_bytes");
    r.peakBytes = optionalField<int64_t>(j, "peak_bytes");
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("fusec-eager's answer is malformed: ") + e.what());
  }
  return r;
}

}  // namespace fusec::bench
