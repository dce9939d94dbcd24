// The inputs of the language models' programs (token ids and targets), checked and made up in
// one place for every model that takes them: the zoo (zoo_model.h) and imported .fir models
// (fir_model.h).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "ir/host_tensor.h"

namespace fusec::models {

// Throws Error (one line) unless inputs[name] is exactly `want` (i64[B,T]) with every id in
// [0, vocab): "missing tensor 'ids' (expected i64[2,8])", "token id 37 at ids[0,5] is out of
// range for vocab 37".
void checkTokenInput(const Bindings& inputs, const std::string& name, const Type& want, int64_t vocab);

// The random stream of a model's example inputs: independent of its weights' (which are
// seeded by parameter name), deterministic in `seed`.
std::mt19937_64 exampleStream(uint64_t seed);
// i64 values uniform over [0, classes).
HostTensor uniformIds(const Shape& shape, int64_t classes, std::mt19937_64& rng);
// `ids` and, when `targets`, `targets` of `shape`, uniform over the vocabulary.
Bindings randomTokenInputs(const Shape& shape, int64_t vocab, bool targets, uint64_t seed);

}  // namespace fusec::models
