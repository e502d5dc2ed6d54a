#include "core/template/jinja_parser.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve::jinja {
namespace {

// ---------------------------------------------------------------------------------------------
// Segments: text and tags, with whitespace control applied to the text.

struct Segment {
  enum class Kind { kText, kOutput, kBlock } kind;
  std::string content;  // text, or the tag's inside without delimiters and `-`/`+` markers
  int line;
};

// Deeper nesting of expressions or blocks is refused rather than recursed into (the parser and
// the renderer recurse once per level).
constexpr int kMaxNesting = 200;

class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(++depth) {}
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

bool IsSpaceOrTab(char c) { return c == ' ' || c == '\t'; }
bool IsWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class Segmenter {
 public:
  explicit Segmenter(std::string_view source) : src_(source) {}

  absl::StatusOr<std::vector<Segment>> Run() {
    size_t pos = 0;
    bool strip_next = false, trim_next_newline = false;
    while (pos <= src_.size()) {
      const size_t tag = FindTagStart(pos);
      std::string text(src_.substr(pos, tag - pos));
      if (strip_next) {
        text.erase(0, std::find_if_not(text.begin(), text.end(), IsWhitespace) - text.begin());
      } else if (trim_next_newline) {
        if (text.starts_with("\r\n")) {
          text.erase(0, 2);
        } else if (text.starts_with("\n")) {
          text.erase(0, 1);
        }
      }
      if (tag == src_.size()) {
        Emit(Segment::Kind::kText, std::move(text), pos);
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char marker = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (marker == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), IsWhitespace).base(), text.end());
      } else if (type != '{' && marker != '+' && AtLineStart(tag)) {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), IsSpaceOrTab).base(), text.end());
      }
      Emit(Segment::Kind::kText, std::move(text), pos);
      const size_t inner = tag + 2 + (marker == '-' || marker == '+' ? 1 : 0);
      PDSERVE_ASSIGN_OR_RETURN(const size_t close, FindTagEnd(inner, type, tag));
      const bool strip_marker = close > inner && src_[close - 1] == '-';
      std::string content(src_.substr(inner, close - inner - (strip_marker ? 1 : 0)));
      if (type == '{') Emit(Segment::Kind::kOutput, std::move(content), tag);
      if (type == '%') Emit(Segment::Kind::kBlock, std::move(content), tag);
      strip_next = strip_marker;
      trim_next_newline = type != '{';
      pos = close + 2;
    }
    return std::move(segments_);
  }

 private:
  size_t FindTagStart(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // Whether only spaces and tabs lie between the previous newline (or the start) and `pos`.
  bool AtLineStart(size_t pos) const {
    while (pos > 0 && IsSpaceOrTab(src_[pos - 1])) --pos;
    return pos == 0 || src_[pos - 1] == '\n';
  }

  // The position of the closing "}}", "%}" or "#}"; string literals inside expressions are
  // skipped.
  absl::StatusOr<size_t> FindTagEnd(size_t pos, char type, size_t tag) const {
    const char close = type == '{' ? '}' : type;
    char quote = 0;
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      const char c = src_[i];
      if (type != '#' && quote != 0) {
        if (c == '\\') {
          ++i;
        } else if (c == quote) {
          quote = 0;
        }
      } else if (type != '#' && (c == '\'' || c == '"')) {
        quote = c;
      } else if (c == close && src_[i + 1] == '}') {
        return i;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("template line ", LineOf(tag), ": unclosed '",
                                                   std::string(src_.substr(tag, 2)), "'"));
  }

  int LineOf(size_t pos) const {
    return 1 + static_cast<int>(std::count(src_.begin(), src_.begin() + pos, '\n'));
  }

  void Emit(Segment::Kind kind, std::string content, size_t pos) {
    if (kind == Segment::Kind::kText && content.empty()) return;
    segments_.push_back({kind, std::move(content), LineOf(pos)});
  }

  std::string_view src_;
  std::vector<Segment> segments_;
};

// ---------------------------------------------------------------------------------------------
// Tokens of one tag.

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp, kEnd } kind;
  std::string text;
  Value value;
};

absl::StatusOr<std::vector<Token>> Tokenize(const std::string& s, int line) {
  std::vector<Token> tokens;
  const auto error = [&](std::string what) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", what));
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (IsWhitespace(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = i;
      while (end < s.size() &&
             (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) {
        ++end;
      }
      tokens.push_back({Token::Kind::kName, s.substr(i, end - i), {}});
      i = end;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = i;
      while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
      const bool is_float = end + 1 < s.size() && s[end] == '.' &&
                            std::isdigit(static_cast<unsigned char>(s[end + 1]));
      if (is_float) {
        ++end;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        tokens.push_back({Token::Kind::kFloat, "", Value(std::stod(s.substr(i, end - i)))});
      } else {
        int64_t v = 0;
        std::from_chars(s.data() + i, s.data() + end, v);
        tokens.push_back({Token::Kind::kInt, "", Value(v)});
      }
      i = end;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          text += s[j];
        }
      }
      if (j >= s.size()) return error("unterminated string");
      tokens.push_back({Token::Kind::kString, "", Value(std::move(text))});
      i = j + 1;
    } else {
      static constexpr const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*",
                                             "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                             "]",  "{",  "}",  ",",  ".",  ":",  "|"};
      const char* op = nullptr;
      for (const char* candidate : kOps) {
        if (s.compare(i, std::strlen(candidate), candidate) == 0) {
          op = candidate;
          break;
        }
      }
      if (op == nullptr)
        return error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
      tokens.push_back({Token::Kind::kOp, op, {}});
      i += std::strlen(op);
    }
  }
  tokens.push_back({Token::Kind::kEnd, "", {}});
  return tokens;
}

// ---------------------------------------------------------------------------------------------
// Expressions: recursive descent over one tag's tokens, in Jinja's precedence.

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : tokens_(std::move(tokens)), line_(line) {}

  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool PeekName(std::string_view name) const {
    return Peek().kind == Token::Kind::kName && Peek().text == name;
  }
  bool PeekOp(std::string_view op) const {
    return Peek().kind == Token::Kind::kOp && Peek().text == op;
  }
  bool AcceptName(std::string_view name) { return PeekName(name) && (++pos_, true); }
  bool AcceptOp(std::string_view op) { return PeekOp(op) && (++pos_, true); }

  absl::Status Error(std::string what) const {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line_, ": ", what));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (AcceptOp(op)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(op), "', found '", Describe(Peek()), "'"));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != Token::Kind::kName) {
      return Error(absl::StrCat("expected a name, found '", Describe(Peek()), "'"));
    }
    return tokens_[pos_++].text;
  }
  absl::Status ExpectEnd() {
    if (AtEnd()) return absl::OkStatus();
    return Error(absl::StrCat("unexpected '", Describe(Peek()), "'"));
  }

  // expression := or_expr ["if" or_expr ["else" expression]]
  absl::StatusOr<ExprPtr> Expression() {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return Error("expressions nest too deeply");
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, Or());
    if (!AcceptName("if")) return value;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr condition, Or());
    ExprPtr otherwise;
    if (AcceptName("else")) {
      PDSERVE_ASSIGN_OR_RETURN(otherwise, Expression());
    }
    return Make(Expr::Kind::kTernary, "", std::move(value), std::move(condition),
                std::move(otherwise));
  }

  absl::StatusOr<ExprPtr> Or() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, And());
    while (AcceptName("or")) {
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, And());
      left = Make(Expr::Kind::kBinary, "or", std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> And() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, Not());
    while (AcceptName("and")) {
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, Not());
      left = Make(Expr::Kind::kBinary, "and", std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Not() {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return Error("expressions nest too deeply");
    if (AcceptName("not")) {
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr operand, Not());
      return Make(Expr::Kind::kUnary, "not", std::move(operand));
    }
    return Compare();
  }

  absl::StatusOr<ExprPtr> Compare() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, Math1());
    for (const char* op = AcceptComparison(); op != nullptr; op = AcceptComparison()) {
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, Math1());
      left = Make(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
    return left;
  }

  // The comparison operator at the cursor, consumed; nullptr when there is none.
  const char* AcceptComparison() {
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (AcceptOp(op)) return op;
    }
    if (AcceptName("in")) return "in";
    if (PeekName("not") && NextIsName("in")) {
      pos_ += 2;
      return "not in";
    }
    return nullptr;
  }

  absl::StatusOr<ExprPtr> Math1() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, Concat());
    while (PeekOp("+") || PeekOp("-")) {
      const std::string op = tokens_[pos_++].text;
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, Concat());
      left = Make(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Concat() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, Math2());
    while (AcceptOp("~")) {
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, Math2());
      left = Make(Expr::Kind::kBinary, "~", std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Math2() {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, Unary());
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      const std::string op = tokens_[pos_++].text;
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, Unary());
      left = Make(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Unary() {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return Error("expressions nest too deeply");
    if (PeekOp("-") || PeekOp("+")) {
      const std::string op = tokens_[pos_++].text;
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr operand, Unary());
      return Make(Expr::Kind::kUnary, op, std::move(operand));
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, Primary());
    PDSERVE_ASSIGN_OR_RETURN(value, Postfix(std::move(value)));
    return FiltersAndTests(std::move(value));
  }

  absl::StatusOr<ExprPtr> Primary() {
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kInt:
      case Token::Kind::kFloat:
      case Token::Kind::kString: {
        ExprPtr e = Make(Expr::Kind::kLiteral, "");
        e->value = tokens_[pos_++].value;
        // Adjacent string literals concatenate.
        while (e->value.is_string() && Peek().kind == Token::Kind::kString) {
          e->value = Value(e->value.AsString() + tokens_[pos_++].value.AsString());
        }
        return e;
      }
      case Token::Kind::kName: {
        const std::string name = tokens_[pos_++].text;
        ExprPtr e = Make(Expr::Kind::kLiteral, "");
        if (name == "true" || name == "True") {
          e->value = Value(true);
        } else if (name == "false" || name == "False") {
          e->value = Value(false);
        } else if (name == "none" || name == "None") {
          e->value = Value::None();
        } else {
          e = Make(Expr::Kind::kName, name);
        }
        return e;
      }
      case Token::Kind::kOp:
        if (AcceptOp("(")) {
          PDSERVE_ASSIGN_OR_RETURN(ExprPtr inner, Expression());
          if (PeekOp(",")) {  // a tuple: evaluated as a list
            ExprPtr list = Make(Expr::Kind::kList, "", std::move(inner));
            while (AcceptOp(",") && !PeekOp(")")) {
              PDSERVE_ASSIGN_OR_RETURN(ExprPtr item, Expression());
              list->items.push_back(std::move(item));
            }
            inner = std::move(list);
          }
          PDSERVE_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (AcceptOp("[")) {
          ExprPtr list = Make(Expr::Kind::kList, "");
          while (!AcceptOp("]")) {
            if (!list->items.empty()) PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
            if (AcceptOp("]")) break;
            PDSERVE_ASSIGN_OR_RETURN(ExprPtr item, Expression());
            list->items.push_back(std::move(item));
          }
          return list;
        }
        if (AcceptOp("{")) {
          ExprPtr dict = Make(Expr::Kind::kDict, "");
          while (!AcceptOp("}")) {
            if (!dict->items.empty()) PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
            if (AcceptOp("}")) break;
            PDSERVE_ASSIGN_OR_RETURN(ExprPtr key, Expression());
            PDSERVE_RETURN_IF_ERROR(ExpectOp(":"));
            PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, Expression());
            dict->items.push_back(std::move(key));
            dict->items.push_back(std::move(value));
          }
          return dict;
        }
        [[fallthrough]];
      default:
        return Error(absl::StrCat("unexpected '", Describe(t), "' in an expression"));
    }
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr value) {
    while (true) {
      if (AcceptOp(".")) {
        PDSERVE_ASSIGN_OR_RETURN(std::string name, ExpectName());
        value = Make(Expr::Kind::kAttribute, name, std::move(value));
      } else if (AcceptOp("[")) {
        PDSERVE_ASSIGN_OR_RETURN(value, Subscript(std::move(value)));
      } else if (AcceptOp("(")) {
        ExprPtr call = Make(Expr::Kind::kCall, "", std::move(value));
        PDSERVE_RETURN_IF_ERROR(Arguments(*call));
        value = std::move(call);
      } else {
        return value;
      }
    }
  }

  absl::StatusOr<ExprPtr> Subscript(ExprPtr object) {
    ExprPtr parts[3];
    int colons = 0;
    while (!AcceptOp("]")) {
      if (AcceptOp(":")) {
        if (++colons > 2) return Error("a slice has at most two ':'");
        continue;
      }
      if (parts[colons] != nullptr) return Error("malformed subscript");
      PDSERVE_ASSIGN_OR_RETURN(parts[colons], Expression());
    }
    if (colons == 0) {
      if (parts[0] == nullptr) return Error("empty subscript");
      return Make(Expr::Kind::kSubscript, "", std::move(object), std::move(parts[0]));
    }
    return Make(Expr::Kind::kSlice, "", std::move(object), std::move(parts[0]), std::move(parts[1]),
                std::move(parts[2]));
  }

  // After "(": positional and keyword arguments up to ")".
  absl::Status Arguments(Expr& call) {
    bool first = true;
    while (!AcceptOp(")")) {
      if (!first) PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (AcceptOp(")")) break;
      if (Peek().kind == Token::Kind::kName && NextIsOp("=")) {
        const std::string key = tokens_[pos_].text;
        pos_ += 2;
        PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, Expression());
        call.keywords.emplace_back(key, std::move(value));
      } else {
        PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, Expression());
        call.items.push_back(std::move(value));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> FiltersAndTests(ExprPtr value) {
    while (true) {
      if (AcceptOp("|")) {
        PDSERVE_ASSIGN_OR_RETURN(std::string name, ExpectName());
        ExprPtr filter = Make(Expr::Kind::kFilter, name, std::move(value));
        if (AcceptOp("(")) PDSERVE_RETURN_IF_ERROR(Arguments(*filter));
        value = std::move(filter);
      } else if (AcceptName("is")) {
        const bool negated = AcceptName("not");
        std::string name;
        if (PeekName("none") || PeekName("true") || PeekName("false")) {
          name = tokens_[pos_++].text;
        } else if (AcceptOp("==")) {
          name = "eq";
        } else {
          PDSERVE_ASSIGN_OR_RETURN(name, ExpectName());
        }
        ExprPtr test = Make(Expr::Kind::kTest, name, std::move(value));
        test->negated = negated;
        if (AcceptOp("(")) {
          PDSERVE_RETURN_IF_ERROR(Arguments(*test));
        } else if (!AtEnd() &&
                   (Peek().kind == Token::Kind::kString || Peek().kind == Token::Kind::kInt)) {
          PDSERVE_ASSIGN_OR_RETURN(ExprPtr arg, Primary());  // `is divisibleby 3`
          test->items.push_back(std::move(arg));
        }
        value = std::move(test);
      } else {
        return value;
      }
    }
  }

 private:
  const Token& Peek() const { return tokens_[pos_]; }
  bool NextIsName(std::string_view name) const {
    return pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == Token::Kind::kName &&
           tokens_[pos_ + 1].text == name;
  }
  bool NextIsOp(std::string_view op) const {
    return pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == Token::Kind::kOp &&
           tokens_[pos_ + 1].text == op;
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "end of tag";
      case Token::Kind::kInt:
      case Token::Kind::kFloat:
      case Token::Kind::kString: {
        Budget budget{RenderLimits()};  // a literal token: a number or a string
        return t.value.ToString(budget).value_or("?");
      }
      default:
        return t.text;
    }
  }

  template <typename... Items>
  ExprPtr Make(Expr::Kind kind, std::string name, Items&&... items) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_;
    e->name = std::move(name);
    (e->items.push_back(std::forward<Items>(items)), ...);
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_;
  int depth_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Statements.

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end;
    PDSERVE_RETURN_IF_ERROR(ParseBody({}, &body, &end));
    return body;
  }

 private:
  // Parses statements until a block tag whose keyword is in `terminators` (stored in `*end`, its
  // parser left at the tag's remaining tokens in `rest_`), or the end when `terminators` is empty.
  absl::Status ParseBody(const std::vector<std::string>& terminators, Body* body,
                         std::string* end) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return absl::InvalidArgumentError("template: blocks nest too deeply");
    while (pos_ < segments_.size()) {
      const Segment& seg = segments_[pos_++];
      if (seg.kind == Segment::Kind::kText) {
        body->push_back(MakeStmt(Stmt::Kind::kText, seg.line));
        body->back()->text = seg.content;
        continue;
      }
      PDSERVE_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(seg.content, seg.line));
      auto parser = std::make_unique<ExprParser>(std::move(tokens), seg.line);
      if (seg.kind == Segment::Kind::kOutput) {
        auto stmt = MakeStmt(Stmt::Kind::kOutput, seg.line);
        PDSERVE_ASSIGN_OR_RETURN(stmt->expr, parser->Expression());
        PDSERVE_RETURN_IF_ERROR(parser->ExpectEnd());
        body->push_back(std::move(stmt));
        continue;
      }
      PDSERVE_ASSIGN_OR_RETURN(std::string keyword, parser->ExpectName());
      if (std::find(terminators.begin(), terminators.end(), keyword) != terminators.end()) {
        *end = keyword;
        rest_ = std::move(parser);
        return absl::OkStatus();
      }
      PDSERVE_ASSIGN_OR_RETURN(auto stmt, ParseStatement(keyword, *parser, seg.line));
      body->push_back(std::move(stmt));
    }
    if (!terminators.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("template: missing {% ", terminators.back(), " %}"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement(const std::string& keyword, ExprParser& p,
                                                       int line) {
    if (keyword == "if") return ParseIf(p, line);
    if (keyword == "for") return ParseFor(p, line);
    if (keyword == "set") return ParseSet(p, line);
    if (keyword == "break" || keyword == "continue") {
      PDSERVE_RETURN_IF_ERROR(p.ExpectEnd());
      return MakeStmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
    }
    return p.Error(absl::StrCat("{% ", keyword, " %} is not supported"));
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(ExprParser& p, int line) {
    auto stmt = MakeStmt(Stmt::Kind::kIf, line);
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr condition, p.Expression());
    PDSERVE_RETURN_IF_ERROR(p.ExpectEnd());
    while (true) {
      Body body;
      std::string end;
      PDSERVE_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &body, &end));
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "elif") {
        PDSERVE_ASSIGN_OR_RETURN(condition, rest_->Expression());
        PDSERVE_RETURN_IF_ERROR(rest_->ExpectEnd());
        continue;
      }
      PDSERVE_RETURN_IF_ERROR(rest_->ExpectEnd());
      if (end == "else") {
        PDSERVE_RETURN_IF_ERROR(ParseBody({"endif"}, &stmt->else_body, &end));
        PDSERVE_RETURN_IF_ERROR(rest_->ExpectEnd());
      }
      return stmt;
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(ExprParser& p, int line) {
    auto stmt = MakeStmt(Stmt::Kind::kFor, line);
    do {
      PDSERVE_ASSIGN_OR_RETURN(std::string target, p.ExpectName());
      stmt->targets.push_back(target);
    } while (p.AcceptOp(","));
    if (!p.AcceptName("in")) return p.Error("expected 'in' in {% for %}");
    PDSERVE_ASSIGN_OR_RETURN(stmt->expr, p.Or());
    if (p.AcceptName("if")) {
      PDSERVE_ASSIGN_OR_RETURN(stmt->condition, p.Expression());
    }
    if (p.AcceptName("recursive")) return p.Error("recursive loops are not supported");
    PDSERVE_RETURN_IF_ERROR(p.ExpectEnd());
    std::string end;
    PDSERVE_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, &stmt->body, &end));
    PDSERVE_RETURN_IF_ERROR(rest_->ExpectEnd());
    if (end == "else") {
      PDSERVE_RETURN_IF_ERROR(ParseBody({"endfor"}, &stmt->else_body, &end));
      PDSERVE_RETURN_IF_ERROR(rest_->ExpectEnd());
    }
    return stmt;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(ExprParser& p, int line) {
    auto stmt = MakeStmt(Stmt::Kind::kSet, line);
    PDSERVE_ASSIGN_OR_RETURN(std::string target, p.ExpectName());
    stmt->targets.push_back(target);
    if (p.AcceptOp(".")) {
      PDSERVE_ASSIGN_OR_RETURN(stmt->attribute, p.ExpectName());
    } else {
      while (p.AcceptOp(",")) {
        PDSERVE_ASSIGN_OR_RETURN(target, p.ExpectName());
        stmt->targets.push_back(target);
      }
    }
    if (!p.AcceptOp("=")) return p.Error("block {% set %} is not supported; use set x = ...");
    PDSERVE_ASSIGN_OR_RETURN(stmt->expr, p.Expression());
    PDSERVE_RETURN_IF_ERROR(p.ExpectEnd());
    return stmt;
  }

  static std::unique_ptr<Stmt> MakeStmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  std::vector<Segment> segments_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::unique_ptr<ExprParser> rest_;  // the terminator tag's parser, after its keyword
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Segment> segments, Segmenter(source).Run());
  return StmtParser(std::move(segments)).Run();
}

}  // namespace pdserve::jinja
