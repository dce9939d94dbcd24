// A model imported from a .fir file: what the PyTorch exporter (frontend/python/fusec/export.py)
// writes, or any hand-written module of the same form, as an api::Model.
//
// The file holds one function, @forward: one input of role "ids" (i64[B,T], the token ids)
// and one output, the logits f32[B,T,V]; its params are the model's trainable weights (role
// weight) and its buffers (role buffer: RoPE tables, masks, folded constants), under the
// PyTorch names. The programs are those of the zoo: forward; train_step and fwd_bwd append
// the mean cross entropy of the logits over `targets` (i64[B,T]) to the imported forward, and
// the program passes differentiate it and add AdamW as for any model. A model with dropout
// (the exporter's train-mode trace) has `dropout` ops reading one more input, the step's key
// (role "dropout_key", i64[]): the training programs keep them (the key bound each step from
// the run's dropout seed, ir/step_inputs.h) and forward drops them, as PyTorch's eval mode
// does. The graph is
// specialised to the [B,T] it was exported at (onlyShape). Its initial weights are the
// exporter's: weights.safetensors beside the .fir.
#pragma once
#include <memory>
#include <string>

#include "api/model.h"

namespace fusec::models {

// Loads and checks `path`. Throws Error (one line, naming the file) for a file that cannot be
// read or parsed, or whose module is not of the form above.
std::unique_ptr<api::Model> firModel(const std::string& path);

}  // namespace fusec::models
