// The kernel IR's statements: what a kernel's schedule builds and one printer writes as CUDA.
//
// A family's schedule (codegen/*_kernels.cpp) does not write CUDA text; it appends statements
// to a builder (CodeWriter, codegen/body_emitter.h): loops with their kind (grid-stride over a
// count, a vector's lanes, counted, strided), branches, index and value registers (`let`),
// accumulators and their steps, reductions with the scope that combines them (warp, column
// tile, group of warps), and loads and stores with their vector width. Index expressions are
// IndexExprs (codegen/index_expr.h), simplified where they are built; the scalar values come
// from the op table's formulas (codegen/scalar_ops.h) through BodyEmitter. `print` writes the
// CUDA; `dump` writes the statements themselves (`fusec codegen --emit kir`), which is what the
// lit tests of a schedule check: which loops, which widths, which reductions, not register
// names.
//
// Statements a schedule has not modelled yet are `text` lines, printed verbatim (the attention
// templates, the reductions' and scatters' shared-memory staging and warp ballots, the
// kernels' preambles). They move to typed statements family by family; each step keeps the printed
// CUDA byte-identical (scripts/kernel-sources.sh before and after).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/types.h"

namespace fusec::codegen::kir {

enum class StmtKind : uint8_t {
  Text,        // a line (or lines) of CUDA not modelled yet, verbatim
  Comment,     // `// text`
  Let,         // `const <type> <name> = <value>;`: an index or value register
  Var,         // `<type> <name> = <value>;`: a register that changes (an accumulator)
  Array,       // `<type> <name>[<size>];`: registers indexed by constants (a vector's lanes, columns)
  Assign,      // `<target> = <value>;`: an element of such an array
  Accumulate,  // `<acc> = <combiner>()(<acc>, <value>);`: one step of a reduction, in order
  Reduce,      // `const <type> <name> = ...;`: an accumulator combined across a scope (ReduceScope)
  Load,        // a register from memory, or (width > 1) a register array as one 16-byte vector
  Store,       // element store `ptr[position] = value;`, or a vector of `width` from array `value`
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

struct Stmt {
  StmtKind kind = StmtKind::Text;
  // Text, Comment: the text; Block: the header; If: the condition; Let, Var, Load, Reduce, Array:
  // the register (a Load of width > 1: the register array); Accumulate, Assign: the element.
  std::string text;
  // Let, Var, Load, Array: the register's type ("fusec_idx", "float"); Store: the pointer; Loop:
  // the variable; Accumulate, Reduce: the combiner ("fusec_sum").
  std::string target;
  // Let, Var, Assign: the value; Store: the value (width 1) or the register array (width > 1);
  // Load: the pointer; Accumulate: what is added; Reduce: the accumulator (WarpGroup: its
  // parts); Array: its size.
  std::string value;
  std::string position;  // Store, Load: the element's (or the vector's first element's) position
  int width = 1;         // Store, Load: elements; Loop (Lanes): the lanes; Reduce (WarpGroup): its lanes
  DType memory = DType::f32;  // Load (width 1): the element type in memory, converted to `target`
  // Load (width > 1): the lane that loads the vector for all (`j == 0`); Loop (Strided): the
  // condition tested with the bound (`live`), or none.
  std::string guard;
  // Let, Load, Array: what the value is (`#3 = mul(#1, #2) : f32[4,8]`); Reduce: its result's type.
  std::string note;
  // Loop: `for (<type> <var> = <start>; [<guard> && ]<var> < <bound>; <step>)`.
  LoopKind loop = LoopKind::GridStride;
  std::string start, bound, step;
  std::string firstBlock, blocks;  // Loop (GridStride): the block of item 0, the blocks that share the items
  int unroll = 0;           // Loop: 0 no pragma, -1 `#pragma unroll`, n `#pragma unroll n`
  ReduceScope scope = ReduceScope::Thread;
  std::string divisor;      // Reduce: a mean's element count (a literal), or none
  bool elseBranch = false;  // If: an `else` or `else if` of the branch before it
  std::string close = "}";  // Block: the closing line
  std::vector<std::unique_ptr<Stmt>> body;  // Block, Loop, If
};

// A statement of `kind` with its three main fields set (what each means for a kind: Stmt).
Stmt make(StmtKind kind, std::string text = "", std::string target = "", std::string value = "");

// The scopes a schedule opens (CodeWriter::open).
Stmt gridStrideLoop(const std::string& var, int64_t count, const std::string& firstBlock, const std::string& blocks);
Stmt laneLoop(const std::string& var, int width);
Stmt countedLoop(const std::string& var, int64_t count, int unroll);
Stmt countedLoop(const std::string& var, const std::string& count, int unroll);  // a count written as text
Stmt stridedLoop(const std::string& var, const std::string& start, const std::string& bound, const std::string& step,
                 const std::string& guard = "", int unroll = 0);
Stmt ifThen(const std::string& cond);
Stmt elseIf(const std::string& cond);  // cond empty: `else`

// The CUDA text of `stmts` at indentation `depth` (two spaces a level).
std::string print(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);
// The statements as kernel IR, one a line, nested by indentation (see the top).
std::string dump(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);

}  // namespace fusec::codegen::kir
