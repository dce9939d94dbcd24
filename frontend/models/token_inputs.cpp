#include "frontend/models/token_inputs.h"

namespace fusec::models {

void checkTokenInput(const Bindings& inputs, const std::string& name, const Type& want, int64_t vocab) {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw Error("missing tensor '" + name + "' (expected " + want.str() + ")");
  const HostTensor& t = it->second;
  if (t.type != want) throw Error("tensor '" + name + "' is " + t.type.str() + ", expected " + want.str());
  const int64_t T = t.type.shape.back();
  for (size_t k = 0; k < t.i.size(); ++k)
    if (t.i[k] < 0 || t.i[k] >= vocab)
      throw Error("token id " + std::to_string(t.i[k]) + " at " + name + "[" + std::to_string(int64_t(k) / T) + "," +
                  std::to_string(int64_t(k) % T) + "] is out of range for vocab " + std::to_string(vocab));
}

std::mt19937_64 exampleStream(uint64_t seed) { return std::mt19937_64(seed ^ 0x746f6b656e73ull); }  // "tokens"

HostTensor uniformIds(const Shape& shape, int64_t classes, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> id(0, classes - 1);
  HostTensor t = HostTensor::zeros(Type{DType::i64, shape});
  for (auto& x : t.i) x = id(rng);
  return t;
}

Bindings randomTokenInputs(const Shape& shape, int64_t vocab, bool targets, uint64_t seed) {
  std::mt19937_64 rng = exampleStream(seed);
  Bindings in;
  in["ids"] = uniformIds(shape, vocab, rng);
  if (targets) in["targets"] = uniformIds(shape, vocab, rng);  // drawn after the ids, as bench always did
  return in;
}

}  // namespace fusec::models
