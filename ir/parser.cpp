#include "ir/parser.h"
#include "support/regular_file.h"

#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <unordered_map>

#include "ir/type_rules.h"
#include "ir/verifier.h"

namespace fusec {
namespace {

enum class Tok { Ident, Value, Func, Number, String, Punct, End };

struct Token {
  Tok kind;
  std::string text;  // identifier, name without sigil, number text, decoded string, punctuation
  SourceLoc loc;
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End: return "end of file";
    case Tok::Value: return "'%" + t.text + "'";
    case Tok::Func: return "'@" + t.text + "'";
    case Tok::String: return "a string";
    default: return "'" + t.text + "'";
  }
}

class Lexer {
 public:
  Lexer(std::string_view src, const std::string& file) : src_(src), file_(file) {}

  Token next() {
    skipSpaceAndComments();
    SourceLoc loc{line_, col_};
    if (pos_ >= src_.size()) return {Tok::End, "", loc};
    char c = src_[pos_];
    if (isIdentStart(c)) return {Tok::Ident, take(isIdentChar), loc};
    if (c == '%' || c == '@') {
      advance();
      std::string name = take(isNameChar);
      if (name.empty()) throw errorAt(file_, loc, std::string("expected a name after '") + c + "'");
      return {c == '%' ? Tok::Value : Tok::Func, name, loc};
    }
    if (c == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '>') {
      advance();
      advance();
      return {Tok::Punct, "->", loc};
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') return number(loc);
    if (c == '"') return string(loc);
    if (std::string_view("(){}[],:=").find(c) != std::string_view::npos) {
      advance();
      return {Tok::Punct, std::string(1, c), loc};
    }
    char buf[48];
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      std::snprintf(buf, sizeof buf, "unexpected byte 0x%02x", unsigned(static_cast<unsigned char>(c)));
    else
      std::snprintf(buf, sizeof buf, "unexpected character '%c'", c);
    throw errorAt(file_, loc, buf);
  }

 private:
  static bool isIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  static bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  static bool isNameChar(char c) { return isIdentChar(c) || c == '.'; }

  void advance() {
    if (src_[pos_] == '\n') { ++line_; col_ = 1; }
    else ++col_;
    ++pos_;
  }
  std::string take(bool (*pred)(char)) {
    size_t b = pos_;
    while (pos_ < src_.size() && pred(src_[pos_])) advance();
    return std::string(src_.substr(b, pos_ - b));
  }
  void skipSpaceAndComments() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') advance();
      else if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/')
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
      else break;
    }
  }
  Token number(SourceLoc loc) {
    size_t b = pos_;
    if (src_[pos_] == '-' || src_[pos_] == '+') advance();
    if (pos_ < src_.size() && std::isalpha(static_cast<unsigned char>(src_[pos_]))) {
      std::string word = take(isIdentChar);  // -inf, +inf, -nan
      if (word != "inf" && word != "nan") throw errorAt(file_, loc, "malformed number '" + std::string(src_.substr(b, pos_ - b)) + "'");
      return {Tok::Number, std::string(src_.substr(b, pos_ - b)), loc};
    }
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      bool expSign = (c == '-' || c == '+') && pos_ > b && (src_[pos_ - 1] == 'e' || src_[pos_ - 1] == 'E');
      if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || expSign) advance();
      else break;
    }
    std::string text(src_.substr(b, pos_ - b));
    if (text == "-" || text == "+" || text == ".") throw errorAt(file_, loc, "malformed number '" + text + "'");
    return {Tok::Number, text, loc};
  }
  Token string(SourceLoc loc) {
    advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') throw errorAt(file_, loc, "unterminated string");
      char c = src_[pos_];
      advance();
      if (c == '"') break;
      if (c != '\\') { out += c; continue; }
      if (pos_ >= src_.size()) throw errorAt(file_, loc, "unterminated string");
      char e = src_[pos_];
      advance();
      if (e == 'n') out += '\n';
      else if (e == 't') out += '\t';
      else if (e == '"' || e == '\\') out += e;
      else if (e == 'x' && pos_ + 1 < src_.size() && std::isxdigit(static_cast<unsigned char>(src_[pos_])) &&
               std::isxdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
        out += char(std::stoi(std::string(src_.substr(pos_, 2)), nullptr, 16));
        advance();
        advance();
      } else throw errorAt(file_, loc, std::string("bad escape '\\") + e + "' in string");
    }
    return {Tok::String, out, loc};
  }

  std::string_view src_;
  const std::string& file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

constexpr int kMaxNesting = 64;
constexpr int64_t kMaxDim = int64_t(1) << 40;

class Parser {
 public:
  Parser(std::string_view src, const std::string& file) : lex_(src, file), file_(file) { tok_ = lex_.next(); }

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    m->sourceName = file_;
    while (tok_.kind != Tok::End) {
      if (!isIdent("func")) fail("expected 'func' but found " + describe(tok_));
      SourceLoc loc = tok_.loc;
      bump();
      if (tok_.kind != Tok::Func) fail("expected a function name '@name' but found " + describe(tok_));
      std::string name = tok_.text;
      if (m->find(name)) fail("duplicate function @" + name);
      bump();
      Graph& g = m->add(name);
      g.loc = loc;
      expect("{");
      graphBody(g, 0);
    }
    return m;
  }

 private:
  [[noreturn]] void fail(const std::string& msg, SourceLoc loc) { throw errorAt(file_, loc, msg); }
  [[noreturn]] void fail(const std::string& msg) { fail(msg, tok_.loc); }
  void bump() { tok_ = lex_.next(); }
  bool isPunct(const char* p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool isIdent(const char* w) const { return tok_.kind == Tok::Ident && tok_.text == w; }
  void expect(const char* p) {
    if (!isPunct(p)) fail(std::string("expected '") + p + "' but found " + describe(tok_));
    bump();
  }

  // Statements up to and including "return ... }". `g` is a fresh naming scope.
  void graphBody(Graph& g, int depth) {
    if (depth > kMaxNesting) fail("kernel bodies nested deeper than " + std::to_string(kMaxNesting));
    std::unordered_map<std::string, Value*> scope;
    while (!isIdent("return")) {
      if (tok_.kind == Tok::End) fail("expected 'return' before the end of file");
      statement(g, scope, depth);
    }
    SourceLoc retLoc = tok_.loc;
    bump();
    if (tok_.kind == Tok::Value) {
      while (true) {
        Value* v = lookup(scope);
        std::string updates;
        if (isPunct("->")) {
          bump();
          if (tok_.kind != Tok::String) fail("expected a param name string after '->' but found " + describe(tok_));
          if (tok_.text.empty()) fail("the param name after '->' is empty");
          updates = tok_.text;
          bump();
        }
        g.addOutput(v, updates);
        if (!isPunct(",")) break;
        bump();
      }
    }
    if (!isPunct("}")) fail("expected '}' after return but found " + describe(tok_));
    bump();
    if (!g.loc.valid()) g.loc = retLoc;
  }

  Value* lookup(const std::unordered_map<std::string, Value*>& scope) {
    if (tok_.kind != Tok::Value) fail("expected a value '%name' but found " + describe(tok_));
    auto it = scope.find(tok_.text);
    if (it == scope.end()) fail("use of undefined value %" + tok_.text);
    bump();
    return it->second;
  }

  static bool allDigits(const std::string& s) {
    for (char c : s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  }

  // A printer-numbered name: all digits, or in a kernel body (depth > 0) also kN.
  static bool numbered(const std::string& n, int depth) {
    if (allDigits(n)) return true;
    return depth > 0 && n.size() > 1 && n[0] == 'k' && allDigits(n.substr(1));
  }

  void statement(Graph& g, std::unordered_map<std::string, Value*>& scope, int depth) {
    // results
    std::vector<Token> resultToks;
    while (true) {
      if (tok_.kind != Tok::Value) fail("expected a result '%name' or 'return' but found " + describe(tok_));
      resultToks.push_back(tok_);
      bump();
      if (!isPunct(",")) break;
      bump();
    }
    expect("=");
    if (tok_.kind != Tok::Ident) fail("expected an op name but found " + describe(tok_));
    Token opTok = tok_;
    const OpInfo* info = findOp(opTok.text);
    if (!info) fail("unknown op '" + opTok.text + "'");
    bump();
    auto op = makeOp(info->kind);
    op->loc = opTok.loc;
    // operands
    expect("(");
    if (!isPunct(")")) {
      while (true) {
        op->operands.push_back(lookup(scope));
        if (!isPunct(",")) break;
        bump();
      }
    }
    expect(")");
    // attributes
    std::vector<bool> given(info->attrs.size(), false);
    if (isPunct("{")) {
      bump();
      while (!isPunct("}")) {
        if (tok_.kind != Tok::Ident) fail("expected an attribute name but found " + describe(tok_));
        int i = info->attrIndex(tok_.text);
        if (i < 0) fail(std::string(info->name) + " has no attribute '" + tok_.text + "'");
        if (given[size_t(i)]) fail("attribute '" + tok_.text + "' given twice");
        given[size_t(i)] = true;
        bump();
        expect("=");
        op->attrs[size_t(i)] = attrValue(info->attrs[size_t(i)]);
        if (isPunct(",")) bump();
        else if (!isPunct("}")) fail("expected ',' or '}' in attributes but found " + describe(tok_));
      }
      bump();
    }
    for (size_t i = 0; i < info->attrs.size(); ++i)
      if (!given[i] && !info->attrs[i].defaultValue)
        fail(std::string(info->name) + " requires attribute '" + info->attrs[i].name + "'", opTok.loc);
    // result types
    expect(":");
    std::vector<Type> types;
    std::vector<int64_t> offsets;
    while (true) {
      types.push_back(type());
      offsets.push_back(-1);
      if (tok_.kind == Tok::Func) {  // `@offset`: an arena offset from the memory plan
        if (tok_.text.empty() || !allDigits(tok_.text) || tok_.text.size() > 15)
          fail("expected an arena offset '@N' after the type but found " + describe(tok_));
        offsets.back() = std::stoll(tok_.text);
        bump();
      }
      if (!isPunct(",")) break;
      bump();
    }
    if (types.size() != resultToks.size())
      fail(std::to_string(resultToks.size()) + " result name" + (resultToks.size() == 1 ? "" : "s") + " but " +
               std::to_string(types.size()) + " result type" + (types.size() == 1 ? "" : "s"),
           opTok.loc);
    // body
    if (isPunct("{")) {
      if (info->kind != OpKind::Kernel) fail(std::string(info->name) + " cannot have a body");
      bump();
      op->body = std::make_unique<Graph>();
      op->body->name = op->attrStr("name");
      op->body->loc = opTok.loc;
      graphBody(*op->body, depth + 1);
    } else if (info->kind == OpKind::Kernel) {
      fail("kernel needs a body '{ ... }' after its result types");
    }
    // check and infer
    std::vector<Type> operandTypes;
    for (Value* v : op->operands) operandTypes.push_back(v->type);
    try {
      checkResultTypes(*info, operandTypes, op->attrs, types, op->body.get());
    } catch (const Error& e) {
      if (e.located) throw;
      fail(e.what(), opTok.loc);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      op->results.push_back(std::make_unique<Value>());
      op->results.back()->type = types[i];
      op->results.back()->offset = offsets[i];
      const std::string& n = resultToks[i].text;
      if (!numbered(n, depth)) op->results.back()->name = n;
      if (!scope.emplace(n, op->results.back().get()).second) fail("redefinition of value %" + n, resultToks[i].loc);
    }
    g.append(std::move(op));
  }

  int64_t integer() {
    if (tok_.kind != Tok::Number) fail("expected an integer but found " + describe(tok_));
    int64_t v = 0;
    const char* b = tok_.text.data();
    const char* e = b + tok_.text.size();
    if (*b == '+') ++b;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec == std::errc::result_out_of_range) fail("integer " + tok_.text + " is out of range");
    if (ec != std::errc() || p != e) fail("expected an integer but found " + describe(tok_));
    bump();
    return v;
  }

  double floating() {
    std::string text = tok_.text;
    if (tok_.kind == Tok::Ident && (text == "inf" || text == "nan")) {
      bump();
      return text == "inf" ? INFINITY : NAN;
    }
    if (tok_.kind != Tok::Number) fail("expected a number but found " + describe(tok_));
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) fail("malformed number '" + text + "'");
    if (errno == ERANGE && std::isinf(v)) fail("number " + text + " is out of range");
    bump();
    return v;
  }

  AttrValue attrValue(const AttrSpec& spec) {
    switch (spec.kind) {
      case AttrKind::Int: return integer();
      case AttrKind::Float: return floating();
      case AttrKind::Bool:
        if (isIdent("true")) { bump(); return true; }
        if (isIdent("false")) { bump(); return false; }
        fail("attribute '" + spec.name + "' expects true or false but found " + describe(tok_));
      case AttrKind::Str: {
        if (tok_.kind != Tok::String) fail("attribute '" + spec.name + "' expects a string but found " + describe(tok_));
        std::string s = tok_.text;
        bump();
        return s;
      }
      case AttrKind::Ints: {
        expect("[");
        std::vector<int64_t> xs;
        if (!isPunct("]")) {
          while (true) {
            xs.push_back(integer());
            if (!isPunct(",")) break;
            bump();
          }
        }
        expect("]");
        return xs;
      }
    }
    fail("internal: bad attribute kind");
  }

  Type type() {
    if (tok_.kind != Tok::Ident) fail("expected a type like f32[4,8] but found " + describe(tok_));
    Type t;
    if (!parseDType(tok_.text, t.dtype)) fail("unknown dtype '" + tok_.text + "' (expected f32, bf16, f16, i64, i32 or bool)");
    bump();
    SourceLoc shapeLoc = tok_.loc;
    expect("[");
    int64_t numel = 1;
    if (!isPunct("]")) {
      while (true) {
        SourceLoc dimLoc = tok_.loc;
        int64_t d = integer();
        if (d < 0 || d > kMaxDim) fail("dimension " + std::to_string(d) + " is out of range", dimLoc);
        if (__builtin_mul_overflow(numel, d, &numel) || numel > kMaxElements)
          fail("shape has too many elements", shapeLoc);
        t.shape.push_back(d);
        if (!isPunct(",")) break;
        bump();
      }
    }
    expect("]");
    return t;
  }

  Lexer lex_;
  const std::string& file_;
  Token tok_;
};

}  // namespace

std::unique_ptr<Module> parseModule(std::string_view text, const std::string& sourceName) {
  auto m = Parser(text, sourceName).module();
  verify(*m);
  return m;
}

std::unique_ptr<Module> parseFile(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return parseModule(text, "<stdin>");
  }
  // A regular file only: a directory read as an empty module, and a named pipe blocked.
  return parseModule(readRegularFile(path), path);
}

}  // namespace fusec
