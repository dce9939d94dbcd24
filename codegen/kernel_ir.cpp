#include "codegen/kernel_ir.h"

#include <algorithm>
#include <iterator>

#include "codegen/cuda_types.h"
#include "ir/error.h"

namespace fusec::codegen::kir {

namespace {

std::string indent(int depth) { return std::string(size_t(2 * depth), ' '); }
std::string noted(const Stmt& s) { return s.note.empty() ? "" : "  // " + s.note; }

// The line that opens a Loop or an If (without its " {").
std::string header(const Stmt& s) {
  if (s.kind == StmtKind::If)
    return !s.elseBranch ? "if (" + s.text + ")" : s.text.empty() ? "else" : "else if (" + s.text + ")";
  if (s.kind != StmtKind::Loop) return s.text;  // Block
  const bool counted = s.loop == LoopKind::Lanes || s.loop == LoopKind::Counted;
  return "for (" + std::string(counted ? "int " : "fusec_idx ") + s.target + " = " + s.start + "; " +
         (s.guard.empty() ? "" : s.guard + " && ") + s.target + " < " + s.bound + "; " +
         (counted ? "++" + s.target : s.target + " += " + s.step) + ")";
}

// The value of a Reduce: its accumulator combined across its scope, divided for a mean.
std::string reduced(const Stmt& s) {
  const std::string comb = s.combiner + "()";
  std::string v;
  switch (s.scope) {
    case ReduceScope::Thread: v = s.value; break;
    case ReduceScope::Warp: v = "fusec_warp_reduce(" + s.value + ", " + comb + ")"; break;
    case ReduceScope::ColumnTile: v = "fusec_col_reduce(" + s.value + ", " + comb + ")"; break;
    case ReduceScope::WarpGroup:
      v = "fusec_group_total<" + std::to_string(s.width) + ">(fusec_part_" + s.value + ", " + comb + ")";
      break;
  }
  return s.divisor.empty() ? v : "(" + v + ") / " + s.divisor;
}

const char* scopeName(ReduceScope s) {
  switch (s) {
    case ReduceScope::Thread: return "thread";
    case ReduceScope::Warp: return "warp";
    case ReduceScope::ColumnTile: return "column-tile";
    case ReduceScope::WarpGroup: return "warp-group";
  }
  return "?";
}

const char* spaceName(Space s) {
  switch (s) {
    case Space::Shared: return "shared";
    case Space::DynamicShared: return "dynamic-shared";
    case Space::Device: return "device";
  }
  return "?";
}

// `__shared__ float stage[256];`, `extern __shared__ __align__(16) unsigned char smem[];`,
// `__device__ unsigned count[3] = {0};`, `__device__ unsigned count = 0;`.
std::string memoryDeclaration(const Stmt& s) {
  const std::string qualifier = s.space == Space::Device          ? "__device__ "
                                : s.space == Space::DynamicShared ? "extern __shared__ __align__(16) "
                                                                  : "__shared__ ";
  return qualifier + s.target + " " + s.text + (s.space == Space::DynamicShared ? "[]" : s.value.empty() ? "" : "[" + s.value + "]") +
         (s.init.empty() ? "" : " = " + s.init) + ";";
}

Stmt loopStmt(LoopKind kind, const std::string& var, const std::string& start, const std::string& bound,
              const std::string& step, int unroll) {
  Stmt s = make(StmtKind::Loop, "", var);
  s.loop = kind;
  s.start = start;
  s.bound = bound;
  s.step = step;
  s.unroll = unroll;
  return s;
}

}  // namespace

Stmt make(StmtKind kind, std::string text, std::string target, std::string value) {
  Stmt s;
  s.kind = kind;
  s.text = std::move(text);
  s.target = std::move(target);
  s.value = std::move(value);
  return s;
}

Stmt gridStrideLoop(const std::string& var, int64_t count, const std::string& firstBlock, const std::string& blocks) {
  Stmt s = loopStmt(LoopKind::GridStride, var, "(fusec_idx)(" + firstBlock + ") * blockDim.x + threadIdx.x",
                    std::to_string(count), "(fusec_idx)(" + blocks + ") * blockDim.x", 0);
  s.firstBlock = firstBlock;
  s.blocks = blocks;
  return s;
}

Stmt laneLoop(const std::string& var, int width) {
  // Unrolled: the lanes' registers are arrays indexed by the lane, which stay registers only
  // when every index is a constant.
  Stmt s = loopStmt(LoopKind::Lanes, var, "0", std::to_string(width), "", -1);
  s.width = width;
  return s;
}

Stmt countedLoop(const std::string& var, int64_t count, int unroll) { return countedLoop(var, std::to_string(count), unroll); }

Stmt countedLoop(const std::string& var, const std::string& count, int unroll) {
  return countedLoopFrom(var, "0", count, unroll);
}

Stmt countedLoopFrom(const std::string& var, const std::string& start, const std::string& bound, int unroll) {
  return loopStmt(LoopKind::Counted, var, start, bound, "", unroll);
}

Stmt stridedLoop(const std::string& var, const std::string& start, const std::string& bound, const std::string& step,
                 const std::string& guard, int unroll) {
  Stmt s = loopStmt(LoopKind::Strided, var, start, bound, step, unroll);
  s.guard = guard;
  return s;
}

Stmt ifThen(const std::string& cond) { return make(StmtKind::If, cond); }

Stmt elseIf(const std::string& cond) {
  Stmt s = ifThen(cond);
  s.elseBranch = true;
  return s;
}

namespace {

void printInto(std::string& out, const std::vector<std::unique_ptr<Stmt>>& stmts, int depth) {
  for (const auto& p : stmts) {
    const Stmt& s = *p;
    const std::string in = indent(depth);
    switch (s.kind) {
      case StmtKind::Text: out += in + s.text + "\n"; break;
      case StmtKind::Comment: out += in + "// " + s.text + "\n"; break;
      case StmtKind::Let: out += in + "const " + s.target + " " + s.text + " = " + s.value + ";" + noted(s) + "\n"; break;
      case StmtKind::Var: out += in + s.target + " " + s.text + " = " + s.value + ";" + noted(s) + "\n"; break;
      case StmtKind::Array: out += in + s.target + " " + s.text + "[" + s.value + "];" + noted(s) + "\n"; break;
      case StmtKind::Assign: out += in + s.text + " = " + s.value + ";\n"; break;
      case StmtKind::Accumulate:
        out += in + s.text + (s.combiner == "+" ? " += " + s.value : " = " + s.combiner + "()(" + s.text + ", " + s.value + ")") +
               ";\n";
        break;
      case StmtKind::Reduce: out += in + "const " + s.target + " " + s.text + " = " + reduced(s) + ";\n"; break;
      case StmtKind::Load:
        out += s.width == 1 ? in + "const " + s.target + " " + s.text + " = " + loadExpr(s.memory, s.value, s.position) + ";" +
                                  noted(s) + "\n"
                            : in + "if (" + s.guard + ") fusec_vload<" + std::to_string(s.width) + ">(" + s.text + ", " +
                                  s.value + " + " + s.position + ");" + noted(s) + "\n";
        break;
      case StmtKind::Store:
        out += s.width == 1 ? in + s.target + "[" + s.position + "] = " + s.value + ";\n"
                            : in + "fusec_vstore<" + std::to_string(s.width) + ">(" + s.target + " + " + s.position + ", " +
                                  s.value + ");\n";
        break;
      case StmtKind::Barrier:
        out += in +
               (s.sync == SyncScope::Block  ? std::string("__syncthreads();")
                : s.sync == SyncScope::Warp ? std::string("__syncwarp();")
                                            : "fusec_group_sync<" + std::to_string(s.width) + ", " + s.value + ">();") +
               noted(s) + "\n";
        break;
      case StmtKind::Memory: out += in + memoryDeclaration(s) + noted(s) + "\n"; break;
      case StmtKind::Define: out += in + "#define " + s.text + " " + s.value + noted(s) + "\n"; break;
      case StmtKind::ArriveLast:
        out += in + "if (!fusec_arrive_last(&" + s.text + ", " + s.value + ")" + (s.guard.empty() ? "" : " || " + s.guard) +
               ") return;\n";
        break;
      case StmtKind::Block:
      case StmtKind::Loop:
      case StmtKind::If:
        if (s.kind == StmtKind::Loop && s.unroll != 0)
          out += in + "#pragma unroll" + (s.unroll > 0 ? " " + std::to_string(s.unroll) : "") + "\n";
        if (s.oneLine) {
          std::string line;
          printInto(line, s.body, 0);
          if (s.body.size() != 1 || line.find('\n') + 1 != line.size())
            throw Error("internal: codegen's one-line " + header(s) + " holds other than one line");
          out += in + header(s) + " " + line;
          break;
        }
        out += in + (header(s).empty() ? std::string("{\n") : header(s) + " {\n");  // a bare block: no leading space
        printInto(out, s.body, depth + 1);
        out += in + (s.kind == StmtKind::Block ? s.close : "}") + "\n";
        break;
    }
  }
}

void dumpInto(std::string& out, const std::vector<std::unique_ptr<Stmt>>& stmts, int depth) {
  for (const auto& p : stmts) {
    const Stmt& s = *p;
    const std::string in = indent(depth);
    switch (s.kind) {
      case StmtKind::Text: {
        // Long texts (a helper's source) by their first line and their size.
        const size_t nl = s.text.find('\n');
        if (nl == std::string::npos) {
          out += in + "text " + s.text + "\n";
        } else {
          size_t lines = 1;
          for (char c : s.text) lines += c == '\n';
          out += in + "text " + s.text.substr(0, nl) + " ... (" + std::to_string(lines) + " lines)\n";
        }
        break;
      }
      case StmtKind::Comment: out += in + "// " + s.text + "\n"; break;
      case StmtKind::Let: out += in + "let " + s.text + ": " + s.target + " = " + s.value + noted(s) + "\n"; break;
      case StmtKind::Var: out += in + "var " + s.text + ": " + s.target + " = " + s.value + noted(s) + "\n"; break;
      case StmtKind::Array: out += in + "array " + s.text + ": " + s.target + "[" + s.value + "]" + noted(s) + "\n"; break;
      case StmtKind::Assign: out += in + "assign " + s.text + " = " + s.value + "\n"; break;
      case StmtKind::Accumulate:
        out += in + "accumulate " + s.text +
               (s.combiner == "+" ? " += " + s.value : " = " + s.combiner + "(" + s.text + ", " + s.value + ")") + "\n";
        break;
      case StmtKind::Reduce:
        out += in + "reduce." + scopeName(s.scope) +
               (s.scope == ReduceScope::WarpGroup ? "<" + std::to_string(s.width) + ">" : std::string()) + " " + s.text +
               ": " + s.target + " = " + s.combiner + "(" + s.value + ")" + (s.divisor.empty() ? "" : " / " + s.divisor) +
               "\n";
        break;
      case StmtKind::Load:
        out += s.width == 1 ? in + "load " + s.text + ": " + s.target + " = " + s.value + "[" + s.position + "] (" +
                                  std::string(dtypeName(s.memory)) + ")" + noted(s) + "\n"
                            : in + "load.v" + std::to_string(s.width) + " " + s.text + " = " + s.value + "[" + s.position +
                                  "] when " + s.guard + noted(s) + "\n";
        break;
      case StmtKind::Store:
        out += in + (s.width == 1 ? "store " : "store.v" + std::to_string(s.width) + " ") + s.target + "[" + s.position +
               "] = " + s.value + "\n";
        break;
      case StmtKind::Barrier:
        out += in +
               (s.sync == SyncScope::Block  ? std::string("barrier.block")
                : s.sync == SyncScope::Warp ? std::string("barrier.warp")
                                            : "barrier.warp-group<" + std::to_string(s.width) + "> of " + s.value) +
               noted(s) + "\n";
        break;
      case StmtKind::Memory:
        out += in + "memory." + spaceName(s.space) + " " + s.text + ": " + s.target +
               (s.space == Space::DynamicShared ? "[]" : s.value.empty() ? "" : "[" + s.value + "]") + (s.init.empty() ? "" : " = " + s.init) + noted(s) + "\n";
        break;
      case StmtKind::Define: out += in + "define " + s.text + " = " + s.value + noted(s) + "\n"; break;
      case StmtKind::ArriveLast:
        out += in + "arrive.last " + s.text + " after " + s.value + (s.guard.empty() ? "" : ", then leave where " + s.guard) +
               "\n";
        break;
      case StmtKind::Block:
        out += in + "block " + s.text + "\n";
        dumpInto(out, s.body, depth + 1);
        break;
      case StmtKind::Loop:
        switch (s.loop) {
          case LoopKind::GridStride:
            out += in + "loop " + s.target + " grid-stride [0, " + s.bound + ") from block " + s.firstBlock + " over " + s.blocks;
            break;
          case LoopKind::Lanes: out += in + "loop " + s.target + " lanes [0, " + s.bound + ")"; break;
          case LoopKind::Counted: out += in + "loop " + s.target + " [" + s.start + ", " + s.bound + ")"; break;
          case LoopKind::Strided:
            out += in + "loop " + s.target + " from " + s.start + " below " + s.bound + " by " + s.step +
                   (s.guard.empty() ? "" : " while " + s.guard);
            break;
        }
        if (s.loop != LoopKind::Lanes && s.unroll != 0)
          out += s.unroll > 0 ? " unroll " + std::to_string(s.unroll) : std::string(" unrolled");
        out += "\n";
        dumpInto(out, s.body, depth + 1);
        break;
      case StmtKind::If:
        out += in + (!s.elseBranch ? "if " + s.text : s.text.empty() ? std::string("else") : "else if " + s.text) + "\n";
        dumpInto(out, s.body, depth + 1);
        break;
    }
  }
}

}  // namespace

std::string print(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth) {
  std::string out;
  printInto(out, stmts, depth);
  return out;
}

std::string dump(const std::vector<std::unique_ptr<Stmt>>& stmts, int depth) {
  std::string out;
  dumpInto(out, stmts, depth);
  return out;
}

}  // namespace fusec::codegen::kir

namespace fusec::codegen {

KernelBuilder::KernelBuilder() {
  root_.kind = kir::StmtKind::Block;
  open_.push_back(&root_);
}

kir::Stmt& KernelBuilder::append(kir::Stmt s) {
  open_.back()->body.push_back(std::make_unique<kir::Stmt>(std::move(s)));
  return *open_.back()->body.back();
}

void KernelBuilder::line(const std::string& s) { append(kir::make(kir::StmtKind::Text, s)); }

void KernelBuilder::comment(const std::string& text) { append(kir::make(kir::StmtKind::Comment, text)); }

void KernelBuilder::let(const std::string& type, const std::string& name, const std::string& value, const std::string& note) {
  kir::Stmt l = kir::make(kir::StmtKind::Let, name, type, value);
  l.note = note;
  append(std::move(l));
}

void KernelBuilder::var(const std::string& type, const std::string& name, const std::string& value,
                        const std::string& note) {
  append(kir::make(kir::StmtKind::Var, name, type, value)).note = note;
}

void KernelBuilder::array(const std::string& type, const std::string& name, const std::string& size, const std::string& note) {
  kir::Stmt a = kir::make(kir::StmtKind::Array, name, type, size);
  a.note = note;
  append(std::move(a));
}

void KernelBuilder::assign(const std::string& element, const std::string& value) {
  append(kir::make(kir::StmtKind::Assign, element, "", value));
}

void KernelBuilder::accumulate(const std::string& acc, const std::string& combiner, const std::string& value) {
  kir::Stmt a = kir::make(kir::StmtKind::Accumulate, acc, "", value);
  a.combiner = combiner;
  append(std::move(a));
}

void KernelBuilder::reduce(const std::string& type, const std::string& name, kir::ReduceScope scope,
                           const std::string& combiner, const std::string& acc, int lanes, const std::string& divisor) {
  kir::Stmt r = kir::make(kir::StmtKind::Reduce, name, type, acc);
  r.combiner = combiner;
  r.scope = scope;
  r.width = lanes;
  r.divisor = divisor;
  append(std::move(r));
}

void KernelBuilder::load(const std::string& type, const std::string& name, DType memory, const std::string& ptr,
                         const std::string& position, const std::string& note) {
  kir::Stmt l = kir::make(kir::StmtKind::Load, name, type, ptr);
  l.position = position;
  l.memory = memory;
  l.note = note;
  append(std::move(l));
}

void KernelBuilder::vectorLoad(int width, const std::string& array, const std::string& ptr, const std::string& position,
                               const std::string& guard, const std::string& note) {
  kir::Stmt l = kir::make(kir::StmtKind::Load, array, "", ptr);
  l.position = position;
  l.width = width;
  l.guard = guard;
  l.note = note;
  append(std::move(l));
}

void KernelBuilder::store(const std::string& ptr, const std::string& position, const std::string& value, int width) {
  kir::Stmt s = kir::make(kir::StmtKind::Store, "", ptr, value);
  s.position = position;
  s.width = width;
  append(std::move(s));
}

void KernelBuilder::groupBarrier(int lanes, int block, const std::string& note) {
  kir::Stmt b = kir::make(kir::StmtKind::Barrier, "", "", std::to_string(block));
  b.sync = kir::SyncScope::WarpGroup;
  b.width = lanes;
  b.note = note;
  append(std::move(b));
}

void KernelBuilder::barrier(kir::SyncScope scope, const std::string& note) {
  kir::Stmt b = kir::make(kir::StmtKind::Barrier);
  b.sync = scope;
  b.note = note;
  append(std::move(b));
}

void KernelBuilder::memory(kir::Space space, const std::string& type, const std::string& name, const std::string& size,
                           const std::string& note, const std::string& init) {
  if (!init.empty() && space != kir::Space::Device) throw Error("internal: codegen initialises a shared array");
  kir::Stmt m = kir::make(kir::StmtKind::Memory, name, type, size);
  m.space = space;
  m.note = note;
  m.init = init;
  append(std::move(m));
}

void KernelBuilder::arriveLast(const std::string& counter, const std::string& expected, const std::string& alsoLeave) {
  kir::Stmt a = kir::make(kir::StmtKind::ArriveLast, counter, "", expected);
  a.guard = alsoLeave;
  append(std::move(a));
}

void KernelBuilder::open(const std::string& header) { open(kir::make(kir::StmtKind::Block, header)); }

void KernelBuilder::open(kir::Stmt scope) { open_.push_back(&append(std::move(scope))); }

void KernelBuilder::define(const std::string& name, const std::string& value, const std::string& note) {
  append(kir::make(kir::StmtKind::Define, name, "", value)).note = note;
}

void KernelBuilder::openOneLine(kir::Stmt scope) {
  scope.oneLine = true;
  open(std::move(scope));
}

void KernelBuilder::close(const std::string& s) {
  if (open_.size() < 2) throw Error("internal: codegen closes a scope it did not open");
  if (open_.back()->oneLine && open_.back()->body.size() != 1)
    throw Error("internal: codegen closes a one-line scope that holds " + std::to_string(open_.back()->body.size()) +
                " statements");
  open_.back()->close = s;
  open_.pop_back();
}

void KernelBuilder::insert(Mark at, std::vector<std::unique_ptr<kir::Stmt>> stmts) {
  if (std::find(open_.begin(), open_.end(), at.scope) == open_.end() || at.at > at.scope->body.size())
    throw Error("internal: codegen inserts lines into a scope it has closed");
  at.scope->body.insert(at.scope->body.begin() + ptrdiff_t(at.at), std::make_move_iterator(stmts.begin()),
                        std::make_move_iterator(stmts.end()));
}

}  // namespace fusec::codegen
