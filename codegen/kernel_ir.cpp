#include "codegen/kernel_ir.h"

#include "codegen/cuda_types.h"

namespace fusec::codegen::kir {

namespace {

std::string indent(int depth) { return std::string(size_t(2 * depth), ' '); }
std::string noted(const Stmt& s) { return s.note.empty() ? "" : "  // " + s.note; }

// The line that opens a Loop or an If (without its " {").
std::string header(const Stmt& s) {
  if (s.kind == StmtKind::If)
    return !s.elseBranch ? "if (" + s.text + ")" : s.text.empty() ? "else" : "else if (" + s.text + ")";
  if (s.kind == StmtKind::Loop && s.loop == LoopKind::Lanes)
    return "for (int " + s.target + " = 0; " + s.target + " < " + std::to_string(s.width) + "; ++" + s.target + ")";
  if (s.kind == StmtKind::Loop)
    return "for (fusec_idx " + s.target + " = (fusec_idx)(" + s.firstBlock + ") * blockDim.x + threadIdx.x; " + s.target +
           " < " + std::to_string(s.count) + "; " + s.target + " += (fusec_idx)(" + s.blocks + ") * blockDim.x)";
  return s.text;  // Block
}

}  // namespace

Stmt gridStrideLoop(const std::string& var, int64_t count, const std::string& firstBlock, const std::string& blocks) {
  Stmt s;
  s.kind = StmtKind::Loop;
  s.loop = LoopKind::GridStride;
  s.target = var;
  s.count = count;
  s.firstBlock = firstBlock;
  s.blocks = blocks;
  return s;
}

Stmt laneLoop(const std::string& var, int width) {
  Stmt s;
  s.kind = StmtKind::Loop;
  s.loop = LoopKind::Lanes;
  s.target = var;
  s.width = width;
  return s;
}

Stmt ifThen(const std::string& cond) {
  Stmt s;
  s.kind = StmtKind::If;
  s.text = cond;
  return s;
}

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
      case StmtKind::Block:
      case StmtKind::Loop:
      case StmtKind::If:
        // A lane loop is unrolled: its registers are arrays indexed by the lane, which stay
        // registers only when every index is a constant.
        if (s.kind == StmtKind::Loop && s.loop == LoopKind::Lanes) out += in + "#pragma unroll\n";
        out += in + header(s) + " {\n";
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
      case StmtKind::Block:
        out += in + "block " + s.text + "\n";
        dumpInto(out, s.body, depth + 1);
        break;
      case StmtKind::Loop:
        if (s.loop == LoopKind::Lanes)
          out += in + "loop " + s.target + " lanes [0, " + std::to_string(s.width) + ")\n";
        else
          out += in + "loop " + s.target + " grid-stride [0, " + std::to_string(s.count) + ") from block " + s.firstBlock +
                 " over " + s.blocks + "\n";
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
