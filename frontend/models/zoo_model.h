// The built-in models as api::Model (api/model.h): the CS336 transformer zoo
// (models/transformer.h), the mixed-precision toy model (models/toy.h) and the naive
// attention programs (models/attention.h). Commands, bench and tests get a model here by name
// and compile it through api::compile, so no caller special-cases one.
#pragma once
#include <memory>
#include <string>

#include "api/model.h"
#include "frontend/models/toy.h"
#include "frontend/models/transformer.h"

namespace fusec::models {

// The transformer of `cfg` (validated). Programs: forward (ids -> logits), train_step (ids,
// targets -> loss, then the AdamW update), fwd_bwd (the loss and every gradient).
std::unique_ptr<api::Model> transformerModel(const ModelConfig& cfg);
// The toy model. Programs: forward (x -> logits), train_step (x, targets -> loss, update).
std::unique_ptr<api::Model> toyModel(const ToyConfig& cfg = {});
// The attention programs at head size `dHead`: attention (q, k, v -> out) and
// attention_backward (q, k, v, grad_out -> dq, dk, dv); q, k, v are f32[B, seq, dHead].
std::unique_ptr<api::Model> attentionModel(int64_t dHead);

// A zoo size (small ... 2.7B, tiny) or "toy"; throws Error("unknown model 'x' (known: ...)").
std::unique_ptr<api::Model> modelByName(const std::string& name);
// The names modelByName knows, in that order, comma-separated ("small, medium, ..., toy").
std::string builtinModelNames();

}  // namespace fusec::models
