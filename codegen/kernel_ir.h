// The kernel IR's statements: what a kernel's schedule builds and one printer writes as CUDA.
//
// A family's schedule (codegen/*_kernels.cpp) does not write CUDA text; it appends statements
// to a kir::Builder (CodeWriter, codegen/body_emitter.h, is that builder): loops with their kind
// (a grid-stride loop over a count, a loop over a vector's lanes), branches, index and value
// registers (`let`), and stores with their vector width. Index expressions are IndexExprs
// (codegen/index_expr.h), simplified where they are built; the scalar values come from the op
// table's formulas (codegen/scalar_ops.h) through BodyEmitter. `print` writes the CUDA;
// `dump` writes the statements themselves (`fusec codegen --emit kir`), which is what the lit
// tests of a schedule check: which loops, which widths, which stores, not register names.
//
// Statements a schedule has not modelled yet are `text` lines, printed verbatim (the
// reduction, scatter and attention families' bodies, the kernels' preambles). They move to
// typed statements family by family; each step keeps the printed CUDA byte-identical
// (scripts/kernel-sources.sh before and after).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/types.h"

namespace fusec::codegen::kir {

enum class StmtKind : uint8_t {
  Text,     // a line (or lines) of CUDA not modelled yet, verbatim
  Comment,  // `// text`
  Let,      // `const <type> <name> = <value>;`: an index or value register
  Load,     // a register from memory, or (width > 1) a register array as one 16-byte vector
  Store,    // element store `ptr[position] = value;`, or a vector of `width` from array `value`
  Block,    // `header {` ... `close`: a function, a plain scope, a loop written as text
  Loop,     // a loop the schedule describes (LoopKind)
  If,       // `if (cond)`, `else if (cond)` or `else` (cond empty; `elseBranch` set)
};

enum class LoopKind : uint8_t {
  GridStride,  // var over [0, count): each thread from its global index, stepping by the grid
  Lanes,       // var over [0, width): a vector's lanes, fully unrolled
};

struct Stmt {
  StmtKind kind = StmtKind::Text;
  // Text, Comment: the text; Block: the header; If: the condition; Let, Load: the register
  // (a Load of width > 1: the register array).
  std::string text;
  // Let, Load: the register's type ("fusec_idx", "float"); Store: the pointer; Loop: the variable.
  std::string target;
  // Let: the value; Store: the value (width 1) or the register array (width > 1); Load: the pointer.
  std::string value;
  std::string position;  // Store, Load: the element's (or the vector's first element's) position
  int width = 1;         // Store, Load: elements; Loop (Lanes): the lanes
  DType memory = DType::f32;  // Load (width 1): the element type in memory, converted to `target`
  std::string guard;          // Load (width > 1): the lane that loads the vector for all (`j == 0`)
  std::string note;           // Let, Load: what the value is (`#3 = mul(#1, #2) : f32[4,8]`)
  LoopKind loop = LoopKind::GridStride;
  int64_t count = 0;         // Loop (GridStride): the items
  std::string firstBlock;    // Loop (GridStride): the block that takes item 0 ("blockIdx.x")
  std::string blocks;        // Loop (GridStride): the blocks that share the items ("gridDim.x")
  bool elseBranch = false;   // If: an `else` or `else if` of the branch before it
  std::string close = "}";   // Block: the closing line
  std::vector<std::unique_ptr<Stmt>> body;  // Block, Loop, If
};

// The scopes a schedule opens (CodeWriter::open).
Stmt gridStrideLoop(const std::string& var, int64_t count, const std::string& firstBlock, const std::string& blocks);
Stmt laneLoop(const std::string& var, int width);
Stmt ifThen(const std::string& cond);
Stmt elseIf(const std::string& cond);  // cond empty: `else`

// The CUDA text of `stmts` at indentation `depth` (two spaces a level).
std::string print(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);
// The statements as kernel IR, one a line, nested by indentation (see the top).
std::string dump(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth = 0);

}  // namespace fusec::codegen::kir
