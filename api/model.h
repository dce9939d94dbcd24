// What compile() needs of a model: its parameters, the programs it can trace, and a check of
// the inputs a step is given. The CS336 zoo, the toy model and the attention programs
// implement it (frontend/models/zoo_model.h); so does any model a user writes against the
// tracing API.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/compile.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec::api {

struct ParamInfo {
  std::string name;  // as in the weights file (a PyTorch state_dict name)
  Shape shape;
  // A buffer (an imported model's causal mask, its RoPE tables): not trained, and free to
  // hold -inf, so the finite-weights check leaves it out.
  bool buffer = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::unique_ptr<Model> clone() const = 0;
  virtual std::string name() const = 0;
  // The trainable parameters, in state_dict order, f32.
  virtual std::vector<ParamInfo> params() const = 0;
  // The program names trace() accepts.
  virtual std::vector<std::string> programs() const = 0;
  // Traces `p` as its program passes expect it (train_step and fwd_bwd: the loss) into `m`,
  // as its only function. Throws Error for a program or shape the model cannot trace.
  virtual Graph& trace(Module& m, const Program& p, const CompileOptions& o) const = 0;
  // Throws Error (one line) when `inputs` cannot feed one call of `p`: a missing input, a
  // wrong dtype or shape, a token id out of the vocabulary.
  virtual void validateInputs(const Program& p, const Bindings& inputs) const = 0;
  // The program `program` at the shape `inputs` give it (the batch, and the sequence length
  // where the model has one): how `fusec run` sizes a program from its input file. Throws
  // Error (one line) when the input that gives the shape is missing or malformed; the rest is
  // validateInputs' job.
  virtual Program programFor(const std::string& program, const Bindings& inputs) const = 0;
  // The model's own initial weights, f32, by the names of params(), deterministic in `seed`.
  virtual Bindings initialWeights(uint64_t seed) const = 0;
  // Random inputs that validateInputs accepts for `p` (token ids uniform over the vocabulary),
  // deterministic in `seed`: what `fusec profile` and the benchmarks feed a program.
  virtual Bindings exampleInputs(const Program& p, uint64_t seed) const = 0;
  // The hyperparameters that describe this instance (a transformer's sizes), in a fixed
  // order, for reports: `compile --stats` and the metadata of the files `run` writes. Empty
  // when the name says it all.
  virtual std::vector<std::pair<std::string, double>> config() const { return {}; }
  // The longest sequence a program of the model takes; 0 when it has no such limit.
  virtual int64_t contextLength() const { return 0; }
  // A model traced at one shape (an imported .fir is specialised to the ids it was exported
  // with) takes only that batch and sequence length: the commands default to them. {0, 0}
  // when any shape fits.
  virtual std::pair<int64_t, int64_t> onlyShape() const { return {0, 0}; }
};

}  // namespace fusec::api
