// The kernel IR's statements: what a kernel's schedule builds and one printer writes as CUDA.
//
// A family's schedule (codegen/*_kernels.cpp) does not write CUDA text; it appends statements
// to a builder (KernelBuilder, below): loops with their kind (grid-stride over a
// count, a vector's lanes, counted, strided), branches, index and value registers (`let`),
// accumulators and their steps, reductions with the scope that combines them (warp, column
// tile, group of warps), loads and stores with their vector width, barriers, shared and
// device arrays, and a grid's last-block arrival. Index expressions are
// IndexExprs (codegen/index_expr.h), simplified where they are built; the scalar values come
// from the op table's formulas (codegen/scalar_ops.h) through BodyEmitter. `print` writes the
// CUDA; `dump` writes the statements themselves (`fusec codegen --emit kir`), which is what the
// lit tests of a schedule check: which loops, which widths, which reductions, not register
// names.
//
// A loop or branch around one statement can print on one line (`openOneLine`): the unrolled
// staging and finishing loops of the reductions are such loops of typed statements.
//
// The attention kernels are CUDA templates (codegen/attention_*.cuh) whose parameters are
// `define` statements (FA_D, FA_GROUP, the tiling, the shared-memory offsets).
//
// Statements a schedule has not modelled yet are `text` lines, printed verbatim (the attention
// templates' bodies and their operands' batch-offset functions, the scatters' prefix sums and
// binary search, declarations of several registers on one line, the kernels' preambles). They
// move to typed statements family by family; each step keeps the printed CUDA byte-identical
// (scripts/kernel-sources.sh before and after).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/helpers.h"
#include "ir/types.h"

namespace fusec::codegen::kir {

enum class StmtKind : uint8_t {
  Text,        // a line (or lines) of CUDA not modelled yet, verbatim
  Comment,     // `// text`
  Let,         // `const <type> <name> = <value>;`: an index or value register
  Var,         // `<type> <name> = <value>;`: a register that changes (an accumulator)
  Array,       // `<type> <name>[<size>];`: registers indexed by constants (a vector's lanes, columns)
  Assign,      // `<target> = <value>;`: an element of such an array
  Accumulate,  // `<acc> = <combiner>()(<acc>, <value>);` (`<acc> += <value>;` for "+"): one step of a reduction, in order
  Reduce,      // `const <type> <name> = ...;`: an accumulator combined across a scope (ReduceScope)
  Load,        // a register from memory, or (width > 1) a register array as one 16-byte vector
  Store,       // element store `ptr[position] = value;`, or a vector of `width` from array `value`
  Barrier,     // `__syncthreads();`, `__syncwarp();` or a group of warps' `fusec_group_sync<lanes, block>();` (SyncScope)
  Memory,      // an array (or one value) in shared memory or device memory (Space): a block's
               // staging, a grid's scratch kept between launches
  ArriveLast,  // `if (!fusec_arrive_last(&<counter>, <expected>)[ || <guard>]) return;`: every
               // block but the last to arrive at the counter leaves (a grid's fixed-order finish)
  Define,      // `#define <name> <value>`: a template's parameter (the attention templates read FA_*)
  Block,       // `header {` ... `close`: a function, a plain scope, a loop written as text
  Loop,        // a loop the schedule describes (LoopKind)
  If,          // `if (cond)`, `else if (cond)` or `else` (cond empty; `elseBranch` set)
};

enum class LoopKind : uint8_t {
  GridStride,  // var over [0, bound): each thread from its global index, stepping by the grid
  Lanes,       // var over [0, width): a vector's lanes, fully unrolled
  Counted,     // int var over [0, bound), unrolled as `unroll` says
  Strided,     // var from `start` below `bound` by `step`, while `guard` holds
};

// Who combines a Reduce's accumulator, always in an order fixed by the launch (so the result
// is the same bits run to run): the thread alone, a warp (a butterfly), the row lanes of a
// column tile (through shared memory, lane by lane), or a group of warps (each warp's value
// in shared memory, behind the group's barrier, added in warp order).
enum class ReduceScope : uint8_t { Thread, Warp, ColumnTile, WarpGroup };

// Who a Barrier waits for: the block's threads, the warp's lanes, or the warps of one group
// (a row's `width` lanes of a block of `value` threads: a named barrier, codegen/reduce_kernels.cpp).
enum class SyncScope : uint8_t { Block, Warp, WarpGroup };

// Where a Memory statement's array lives: the block's shared memory (its size fixed, or
// `extern`: the launch's dynamic shared memory), or device memory at module scope (`__device__`:
// the grid's, and kept from one launch to the next).
enum class Space : uint8_t { Shared, DynamicShared, Device };

struct Stmt {
  StmtKind kind = StmtKind::Text;
  // Text, Comment: the text; Define: the macro's name; Block: the header; If: the condition;
  // Let, Var, Load, Reduce, Array: the register (a Load of width > 1: the register array);
  // Accumulate, Assign: the element; Memory: the array; ArriveLast: the counter (an lvalue).
  std::string text;
  // Let, Var, Load, Array, Reduce, Memory: the type ("fusec_idx", "float"); Store: the
  // pointer; Loop: the variable.
  std::string target;
  // Let, Var, Assign, Define: the value; Store: the value (width 1) or the register array
  // (width > 1); Load: the pointer; Accumulate: what is added; Reduce: the accumulator
  // (WarpGroup: its parts); Array, Memory: its size (Memory: none for one value); ArriveLast:
  // the count of blocks before the last; Barrier (WarpGroup): the block's threads.
  std::string value;
  std::string position;  // Store, Load: the element's (or the vector's first element's) position
  int width = 1;         // Store, Load: elements; Loop (Lanes): the lanes; Reduce, Barrier (WarpGroup): its lanes
  DType memory = DType::f32;  // Load (width 1): the element type in memory, converted to `target`
  // Load (width > 1): the lane that loads the vector for all (`j == 0`); Loop (Strided): the
  // condition tested with the bound (`live`), or none; ArriveLast: who else leaves, or none.
  std::string guard;
  std::string note;      // Let, Var, Load, Array, Memory, Barrier, Define: what it is, why (`#3 = mul(#1, #2) : f32[4,8]`)
  std::string combiner;  // Accumulate, Reduce: the combining functor ("fusec_sum", ops.def's formulas)
  SyncScope sync = SyncScope::Block;  // Barrier
  Space space = Space::Shared;        // Memory
  std::string init;                   // Memory (Device): its initial value, or none
  // Loop: `for (<type> <var> = <start>; [<guard> && ]<var> < <bound>; <var> += <step>)`, `++<var>` for
  // Lanes and Counted (no step).
  LoopKind loop = LoopKind::GridStride;
  std::string start, bound, step;
  std::string firstBlock, blocks;  // Loop (GridStride): the block of item 0, the blocks that share the items
  int unroll = 0;           // Loop: 0 no pragma, -1 `#pragma unroll`, n `#pragma unroll n`
  ReduceScope scope = ReduceScope::Thread;
  std::string divisor;      // Reduce: a mean's element count (a literal), or none
  bool elseBranch = false;  // If: an `else` or `else if` of the branch before it
  bool oneLine = false;     // Loop, If: its one statement printed on the header's line (`for (...) x = y;`)
  std::string close = "}";  // Block: the closing line
  std::vector<std::unique_ptr<Stmt>> body;  // Block, Loop, If
};

// A statement of `kind` with its three main fields set (what each means for a kind: Stmt).
Stmt make(StmtKind kind, std::string text = "", std::string target = "", std::string value = "");

// The scopes a schedule opens (KernelBuilder::open).
Stmt gridStrideLoop(const std::string& var, int64_t count, const std::string& firstBlock, const std::string& blocks);
Stmt laneLoop(const std::string& var, int width);
Stmt countedLoop(const std::string& var, int64_t count, int unroll);
Stmt countedLoop(const std::string& var, const std::string& count, int unroll);  // a count written as text
// int var over [start, bound): a counted loop that skips its first items (those read before it).
Stmt countedLoopFrom(const std::string& var, const std::string& start, const std::string& bound, int unroll);
Stmt stridedLoop(const std::string& var, const std::string& start, const std::string& bound, const std::string& step,
                 const std::string& guard = "", int unroll = 0);
Stmt ifThen(const std::string& cond);
Stmt elseIf(const std::string& cond);  // cond empty: `else`

// The CUDA text of `stmts` at indentation `depth` (two spaces a level).
std::string print(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);
// The statements as kernel IR, one a line, nested by indentation (see the top).
std::string dump(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);

}  // namespace fusec::codegen::kir

namespace fusec::codegen {

// The builder of a kernel's statements: the schedules append to the innermost open scope;
// str() prints the CUDA, kir() the kernel IR.
class KernelBuilder {
 public:
  KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;  // holds pointers into its own statements
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  void line(const std::string& s);        // a statement not modelled yet, verbatim
  void comment(const std::string& text);  // `// text`
  // `const <type> <name> = <value>;  // note`
  void let(const std::string& type, const std::string& name, const std::string& value, const std::string& note = "");
  // `<type> <name> = <value>;  // note`: a register that changes (an accumulator, a count).
  void var(const std::string& type, const std::string& name, const std::string& value, const std::string& note = "");
  // `<type> <name>[<size>];  // note`: registers indexed by constants.
  void array(const std::string& type, const std::string& name, const std::string& size, const std::string& note = "");
  // `element = value;`: an element of such an array.
  void assign(const std::string& element, const std::string& value);
  // `acc = combiner()(acc, value);`, or with combiner "+" `acc += value;` (an integer count, or
  // a sum whose order the loop around it fixes).
  void accumulate(const std::string& acc, const std::string& combiner, const std::string& value);
  // `const <type> <name> = ` accumulator `acc` combined across `scope` (`lanes`: a warp group's
  // threads), divided by `divisor` where it is a mean's (kir::ReduceScope).
  void reduce(const std::string& type, const std::string& name, kir::ReduceScope scope, const std::string& combiner,
              const std::string& acc, int lanes = 32, const std::string& divisor = "");
  // `const <type> <name> = ptr[position]`, converted from `memory` (cuda_types.h loadExpr).
  void load(const std::string& type, const std::string& name, DType memory, const std::string& ptr,
            const std::string& position, const std::string& note);
  // Register array `array` = the 16-byte vector of `width` elements at ptr + position, loaded
  // by the lane for which `guard` holds (the vector loops' first reader: codegen/lanes.h).
  void vectorLoad(int width, const std::string& array, const std::string& ptr, const std::string& position,
                  const std::string& guard, const std::string& note);
  // `ptr[position] = value;`, or with width V the register array `value` stored as one
  // 16-byte vector at ptr + position (codegen/vector_io.h fusec_vstore).
  void store(const std::string& ptr, const std::string& position, const std::string& value, int width = 1);
  // `__syncthreads();` (or `__syncwarp();`), with a note on what it orders.
  void barrier(kir::SyncScope scope = kir::SyncScope::Block, const std::string& note = "");
  // The warps of one group of `lanes` threads (of a block of `block`) wait for each other.
  void groupBarrier(int lanes, int block, const std::string& note = "");
  // An array of `size` `type`s (size empty: one value) in `space`; `init` (Device only) its
  // initial value.
  void memory(kir::Space space, const std::string& type, const std::string& name, const std::string& size,
              const std::string& note = "", const std::string& init = "");
  // Every block but the last of `expected` + 1 to arrive at `counter` returns (and, where
  // `alsoLeave` holds, the last's threads too): a grid's finishing step in a fixed order.
  void arriveLast(const std::string& counter, const std::string& expected, const std::string& alsoLeave = "");
  // `#define <name> <value>  // note`: a parameter of the CUDA template included after it.
  void define(const std::string& name, const std::string& value, const std::string& note = "");
  void open(const std::string& header);  // `header {` and a scope
  void open(kir::Stmt scope);            // a loop or a branch (kir::gridStrideLoop, ...)
  // A loop or branch whose one statement (the next written, before close) is printed on its
  // header's line: `for (int c = 0; c < 4; ++c) a[c] = b[c];`.
  void openOneLine(kir::Stmt scope);
  void close(const std::string& s = "}");
  std::string str() const { return kir::print(root_.body); }
  std::string kir() const { return kir::dump(root_.body); }
  // A place to insert lines later (declarations found while emitting what follows them), in
  // the scope open now; insert must come while that scope is still open.
  struct Mark {
    kir::Stmt* scope;
    size_t at;
  };
  Mark mark() const { return {open_.back(), open_.back()->body.size()}; }
  void insert(Mark at, std::vector<std::unique_ptr<kir::Stmt>> stmts);
  // The statements written so far, handed over (a writer used to build a few lines elsewhere).
  std::vector<std::unique_ptr<kir::Stmt>> take() { return std::move(root_.body); }
  // Marks a helper (codegen/helpers.h) that the text written calls.
  void use(Helper h) { helpers_ |= 1u << unsigned(h); }
  bool uses(Helper h) const { return (helpers_ >> unsigned(h)) & 1u; }

 private:
  kir::Stmt& append(kir::Stmt s);
  kir::Stmt root_;                 // a Block whose body is the source
  std::vector<kir::Stmt*> open_;   // the open scopes, innermost last; open_[0] is &root_
  unsigned helpers_ = 0;
};

}  // namespace fusec::codegen
