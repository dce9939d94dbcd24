// compact: the top-level ops and values of each function made again, in program order, from
// fresh slab blocks (support/slab_pool.h FreshBlocks), and the old ones freed. Nothing about the
// program changes. Why: by the end of `fuse` the top-level ops are scattered among the blocks
// of everything the earlier passes made and dropped and of the kernel bodies' ops, so every
// later walk of the top level (schedule, memory-plan, the verifier, the printer) strides over
// memory it does not read; the larger the graph, the more of those strides miss the caches
// (issue 39). Kernel bodies move over as they are (their own graphs).
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "ir/numbering.h"
#include "passes/pass.h"
#include "support/slab_pool.h"

namespace fusec {
namespace {

// Every field of Op and Value is carried over below; a field added to either must be too
// (the sizes of the build CI makes: libstdc++ on x86-64).
#if defined(__GLIBCXX__) && defined(__x86_64__)
static_assert(sizeof(Op) == 96 && sizeof(Value) == 128,
              "Op or Value changed: carry the new field over in compactGraph, then update these sizes");
#endif

bool compactGraph(Graph& g) {
  const GraphNumbering numbers(g);
  std::vector<Value*> moved(numbers.numValues(), nullptr);  // by old value number
  std::vector<std::unique_ptr<Op>> ops;
  ops.reserve(g.ops.size());
  {
    // What may throw (allocation, a value of another graph) comes first, copying: until the
    // moves below, the function is as it was.
    SlabPool<sizeof(Op)>::FreshBlocks freshOps;
    SlabPool<sizeof(Value)>::FreshBlocks freshValues;
    for (auto& old : g.ops) {
      auto op = std::make_unique<Op>();
      op->kind = old->kind;
      op->loc = old->loc;
      for (Value* v : old->operands) op->operands.push_back(moved[numbers.of(v)]);
      for (auto& r : old->results) {
        auto v = std::make_unique<Value>();
        v->type = r->type;
        v->def = op.get();
        v->index = r->index;
        v->name = r->name;
        v->offset = r->offset;
        moved[numbers.of(r.get())] = v.get();
        op->results.push_back(std::move(v));
      }
      ops.push_back(std::move(op));
    }
  }
  std::vector<Value*> outputs;
  outputs.reserve(g.outputs.size());
  for (Value* v : g.outputs) outputs.push_back(moved[numbers.of(v)]);
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i]->attrs = std::move(g.ops[i]->attrs);
    ops[i]->body = std::move(g.ops[i]->body);
  }
  g.outputs = std::move(outputs);
  g.ops = std::move(ops);  // the old ops and values go back to their pools
  return false;            // the same program
}

}  // namespace

std::unique_ptr<Pass> createCompactPass() {
  return std::make_unique<FunctionPass>("compact", &compactGraph, FunctionPass::Bodies::Leaves);
}

}  // namespace fusec
