#include "ir/IRParser.h"

#include "ir/Error.h"
#include "ir/InputFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/LineIterator.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace commlens {
namespace {

/// Characters that end a bare token (a value name, a number, a scope name).
bool endsToken(char c) { return llvm::isSpace(c) || llvm::StringRef(",)]}:=(#[").contains(c); }

class Parser {
public:
  explicit Parser(ExportedProgram &program) : program_(program), graph_(program.graph()) {}

  llvm::Error parseLine(llvm::StringRef line, unsigned number) {
    line_ = number;
    rest_ = line.trim();
    if (rest_.empty() || rest_.startswith("//"))
      return llvm::Error::success();
    llvm::Error err = llvm::Error::success();
    if (rest_.consume_front("program "))
      err = parseHeader();
    else if (rest_.consume_front("scope "))
      err = parseScope();
    else if (rest_.consume_front("input "))
      err = parseInput();
    else if (rest_.consume_front("output "))
      err = parseOutput();
    else if (rest_.consume_front("call "))
      return parseCall(); // may name values defined later: resolved at the end
    else
      err = parseNode();
    if (err)
      return err;
    skipSpace();
    if (!rest_.empty())
      return fail("unexpected '{}'", rest_.str());
    return llvm::Error::success();
  }

  llvm::Error finish() {
    for (auto &[number, text] : pendingCalls_) {
      line_ = number;
      rest_ = text;
      if (llvm::Error err = parseCallNow())
        return err;
    }
    for (const ModuleScope *s : graph_.scopes().inForwardOrder())
      program_.modulePaths.push_back(s->path());
    for (const CallSignature &sig : graph_.callSignatures())
      if (!llvm::is_contained(program_.modulePaths, sig.path))
        program_.modulePaths.push_back(sig.path);
    return llvm::Error::success();
  }

private:
  template <typename... Args> llvm::Error fail(fmt::format_string<Args...> format, Args &&...args) {
    return makeError("line {}: {}", line_, fmt::format(format, std::forward<Args>(args)...));
  }

  void skipSpace() { rest_ = rest_.ltrim(); }
  bool consume(llvm::StringRef s) {
    skipSpace();
    return rest_.consume_front(s);
  }
  llvm::Error expect(llvm::StringRef s) {
    if (consume(s))
      return llvm::Error::success();
    return fail("expected '{}' at '{}'", s.str(), rest_.str());
  }
  /// A bare token: up to whitespace or punctuation.
  llvm::StringRef token() {
    skipSpace();
    size_t n = 0;
    while (n < rest_.size() && !endsToken(rest_[n]))
      ++n;
    llvm::StringRef t = rest_.take_front(n);
    rest_ = rest_.drop_front(n);
    return t;
  }
  /// An identifier followed by '=' (a keyword argument's name), consumed only when present.
  std::optional<std::string> keyword() {
    skipSpace();
    size_t n = 0;
    while (n < rest_.size() && (llvm::isAlnum(rest_[n]) || rest_[n] == '_'))
      ++n;
    if (n == 0 || n >= rest_.size() || rest_[n] != '=' || llvm::isDigit(rest_[0]))
      return std::nullopt;
    std::string k = rest_.take_front(n).str();
    rest_ = rest_.drop_front(n + 1);
    return k;
  }

  llvm::Expected<std::string> quoted() {
    skipSpace();
    if (!rest_.consume_front("\""))
      return fail("expected a quoted string at '{}'", rest_.str());
    std::string out;
    while (!rest_.empty() && rest_.front() != '"') {
      char c = rest_.front();
      rest_ = rest_.drop_front();
      if (c == '\\') {
        if (rest_.empty())
          break;
        c = rest_.front() == 'n' ? '\n' : rest_.front();
        rest_ = rest_.drop_front();
      }
      out += c;
    }
    if (!rest_.consume_front("\""))
      return fail("unterminated string");
    return out;
  }

  /// `1`, `s0=4` (symbolic with hint) or `s0` / `2*s0` (symbolic without). Expressions may hold
  /// parentheses and commas inside them.
  llvm::Expected<SymInt> symInt() {
    skipSpace();
    size_t n = 0;
    int depth = 0;
    for (; n < rest_.size(); ++n) {
      char c = rest_[n];
      if (c == '(')
        ++depth;
      else if (c == ')' || c == ']' || c == ',') {
        if (depth == 0)
          break;
        if (c == ')')
          --depth;
      }
    }
    llvm::StringRef text = rest_.take_front(n).trim();
    rest_ = rest_.drop_front(n);
    if (text.empty())
      return fail("expected a size at '{}'", rest_.str());
    int64_t v;
    if (!text.getAsInteger(10, v))
      return SymInt::concrete(v);
    auto [expr, hint] = text.rsplit('=');
    if (!hint.empty() && !hint.getAsInteger(10, v))
      return SymInt::symbolic(expr.trim(), v, true);
    return SymInt::symbolic(text, 0, false);
  }

  llvm::Expected<llvm::SmallVector<SymInt, 4>> symIntList() {
    llvm::SmallVector<SymInt, 4> out;
    if (llvm::Error err = expect("["))
      return err;
    if (consume("]"))
      return out;
    do {
      auto s = symInt();
      if (!s)
        return s.takeError();
      out.push_back(*s);
    } while (consume(","));
    if (llvm::Error err = expect("]"))
      return err;
    return out;
  }

  /// Skips a `{...}` annotation (placements printed by --print-after).
  void skipAnnotation() {
    skipSpace();
    if (!rest_.startswith("{"))
      return;
    size_t end = rest_.find('}');
    rest_ = end == llvm::StringRef::npos ? llvm::StringRef() : rest_.drop_front(end + 1);
  }

  /// `%name [: TYPE] [{annotation}]`: defines the value. Returns the argument a node result
  /// holds for it.
  llvm::Expected<Argument> defineValue() {
    if (llvm::Error err = expect("%"))
      return err;
    llvm::StringRef name = token();
    if (name.empty())
      return fail("expected a value name at '{}'", rest_.str());
    if (graph_.lookupValue(name))
      return fail("value '%{}' is defined twice", name.str());
    ValueKind kind = ValueKind::Tensor;
    std::optional<TensorMeta> meta;
    SymInt symbol;
    if (consume(":")) {
      llvm::StringRef type = token();
      if (type == "SymInt") {
        kind = ValueKind::SymInt;
        if (llvm::Error err = expect("("))
          return err;
        auto s = symInt();
        if (!s)
          return s.takeError();
        symbol = *s;
        if (llvm::Error err = expect(")"))
          return err;
      } else if (type == "SymBool") {
        kind = ValueKind::SymBool;
      } else if (type == "SymFloat") {
        kind = ValueKind::SymFloat;
      } else if (type == "Token") {
        kind = ValueKind::Token;
      } else if (type == "CustomObj") {
        kind = ValueKind::CustomObj;
      } else if (auto dtype = scalarTypeFromShortName(type)) {
        auto m = tensorMeta(*dtype);
        if (!m)
          return m.takeError();
        meta = std::move(*m);
      } else {
        return fail("unknown type '{}' of value '%{}'", type.str(), name.str());
      }
    }
    skipAnnotation();
    Value *v = graph_.createValue(name, kind);
    if (meta)
      v->setMeta(std::move(*meta));
    v->setSymbol(symbol);
    switch (kind) {
    case ValueKind::SymInt: return Argument(SymIntArg{v, 0});
    case ValueKind::SymBool: return Argument(SymBoolArg{v, false});
    case ValueKind::SymFloat: return Argument(SymFloatArg{v, 0});
    default: return Argument(v);
    }
  }

  static Value *definedValue(const Argument &a) {
    if (a.is<SymIntArg>())
      return a.get<SymIntArg>().value;
    if (a.is<SymBoolArg>())
      return a.get<SymBoolArg>().value;
    if (a.is<SymFloatArg>())
      return a.get<SymFloatArg>().value;
    return a.tensor();
  }

  /// `[SIZES] [strides [STRIDES]] [device "D"]` after the dtype.
  llvm::Expected<TensorMeta> tensorMeta(ScalarType dtype) {
    TensorMeta m;
    m.dtype = dtype;
    auto sizes = symIntList();
    if (!sizes)
      return sizes.takeError();
    m.sizes = std::move(*sizes);
    int64_t stride = 1;
    m.strides.resize(m.sizes.size());
    for (size_t i = m.sizes.size(); i-- > 0;) {
      m.strides[i] = SymInt::concrete(stride);
      stride *= std::max<int64_t>(m.sizes[i].hint, 1);
    }
    if (consume("strides ")) {
      auto strides = symIntList();
      if (!strides)
        return strides.takeError();
      if (strides->size() != m.sizes.size())
        return fail("{} strides for {} sizes", strides->size(), m.sizes.size());
      m.strides = std::move(*strides);
    }
    if (consume("device ")) {
      auto d = quoted();
      if (!d)
        return d.takeError();
      auto dev = device(*d);
      if (!dev)
        return dev.takeError();
      m.device = *dev;
    }
    return m;
  }

  llvm::Expected<Device> device(llvm::StringRef text) {
    Device d;
    auto [type, index] = text.split(':');
    d.type = type.str();
    if (!index.empty()) {
      int64_t i;
      if (index.getAsInteger(10, i))
        return fail("bad device '{}'", text.str());
      d.index = i;
    }
    return d;
  }

  llvm::Expected<Value *> useValue() {
    llvm::StringRef name = token();
    Value *v = graph_.lookupValue(name);
    if (!v)
      return fail("use of undefined value '%{}'", name.str());
    return v;
  }

  llvm::Expected<double> floatLiteral() {
    llvm::StringRef t = token();
    if (t == "inf")
      return std::numeric_limits<double>::infinity();
    if (t == "-inf")
      return -std::numeric_limits<double>::infinity();
    if (t == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    double d;
    if (t.getAsDouble(d))
      return fail("expected a number, got '{}'", t.str());
    return d;
  }

  /// One argument (see the header's ARG).
  llvm::Expected<Argument> argument() {
    skipSpace();
    if (rest_.empty())
      return fail("expected an argument");
    if (consume("%")) {
      auto v = useValue();
      if (!v)
        return v.takeError();
      switch ((*v)->kind()) {
      case ValueKind::SymInt: return Argument(SymIntArg{*v, 0});
      case ValueKind::SymBool: return Argument(SymBoolArg{*v, false});
      case ValueKind::SymFloat: return Argument(SymFloatArg{*v, 0});
      default: return Argument(*v);
      }
    }
    if (rest_.startswith("["))
      return list();
    if (rest_.startswith("\"")) {
      auto s = quoted();
      if (!s)
        return s.takeError();
      return Argument(std::move(*s));
    }
    if (consume("device(")) {
      auto s = quoted();
      if (!s)
        return s.takeError();
      auto d = device(*s);
      if (!d)
        return d.takeError();
      if (llvm::Error err = expect(")"))
        return err;
      return Argument(*d);
    }
    if (consume("complex(")) {
      auto re = floatLiteral();
      if (!re)
        return re.takeError();
      if (llvm::Error err = expect(","))
        return err;
      auto im = floatLiteral();
      if (!im)
        return im.takeError();
      if (llvm::Error err = expect(")"))
        return err;
      return Argument(ComplexArg{*re, *im});
    }
    llvm::StringRef saved = rest_;
    llvm::StringRef t = token();
    if (t == "None")
      return Argument(NoneArg{});
    if (t == "True" || t == "False")
      return Argument(t == "True");
    if (t.consume_front("torch.")) {
      for (unsigned i = 0; i <= static_cast<unsigned>(ScalarType::UInt64); ++i)
        if (torchName(static_cast<ScalarType>(i)) == "torch." + t.str())
          return Argument(static_cast<ScalarType>(i));
      for (unsigned i = 0; i <= static_cast<unsigned>(Layout::Strided); ++i)
        if (name(static_cast<Layout>(i)) == t)
          return Argument(static_cast<Layout>(i));
      for (unsigned i = 0; i <= static_cast<unsigned>(MemoryFormat::Preserve); ++i)
        if (name(static_cast<MemoryFormat>(i)) == t)
          return Argument(static_cast<MemoryFormat>(i));
      return fail("unknown constant 'torch.{}'", t.str());
    }
    int64_t i;
    if (!t.getAsInteger(10, i))
      return Argument(i);
    rest_ = saved;
    auto d = floatLiteral();
    if (!d) {
      llvm::consumeError(d.takeError());
      return fail("expected an argument at '{}'", saved.str());
    }
    return Argument(*d);
  }

  /// `[...]`: the list kind follows from its elements.
  llvm::Expected<Argument> list() {
    if (llvm::Error err = expect("["))
      return err;
    std::vector<Argument> items;
    if (!consume("]")) {
      do {
        auto a = argument();
        if (!a)
          return a.takeError();
        items.push_back(std::move(*a));
      } while (consume(","));
      if (llvm::Error err = expect("]"))
        return err;
    }
    auto all = [&](auto pred) { return llvm::all_of(items, pred); };
    if (items.empty() || all([](const Argument &a) { return a.is<int64_t>(); })) {
      IntList l;
      for (const Argument &a : items)
        l.push_back(a.get<int64_t>());
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.is<int64_t>() || a.is<SymIntArg>(); })) {
      SymIntList l;
      for (const Argument &a : items)
        l.push_back(a.is<SymIntArg>() ? a.get<SymIntArg>() : SymIntArg{nullptr, a.get<int64_t>()});
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.isTensor(); })) {
      TensorList l;
      for (const Argument &a : items)
        l.push_back(a.tensor());
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.isTensor() || a.isNone(); })) {
      OptionalTensorList l;
      for (const Argument &a : items)
        l.items.push_back(a.isTensor() ? a.tensor() : nullptr);
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.is<double>(); })) {
      FloatList l;
      for (const Argument &a : items)
        l.push_back(a.get<double>());
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.is<bool>(); })) {
      BoolList l;
      for (const Argument &a : items)
        l.push_back(a.get<bool>());
      return Argument(l);
    }
    if (all([](const Argument &a) { return a.is<std::string>(); })) {
      StringList l;
      for (const Argument &a : items)
        l.push_back(a.get<std::string>());
      return Argument(l);
    }
    return fail("list mixes kinds of elements");
  }

  llvm::Error parseHeader() {
    // program torch VERSION schema MAJOR.MINOR [dialect NAME]...
    if (!consume("torch"))
      return fail("expected 'program torch VERSION schema MAJOR.MINOR'");
    skipSpace();
    if (!rest_.startswith("schema "))
      program_.torchVersion = token().str();
    if (!consume("schema"))
      return fail("expected 'schema MAJOR.MINOR'");
    auto [major, minor] = token().split('.');
    if (major.getAsInteger(10, program_.schemaVersion.major) || minor.getAsInteger(10, program_.schemaVersion.minor))
      return fail("bad schema version");
    while (consume("dialect "))
      program_.verifiers.push_back(token().str());
    return llvm::Error::success();
  }

  ModuleScope *lookupScope(llvm::StringRef display) const {
    for (ModuleScope *s : graph_.scopes().inForwardOrder())
      if (s->displayName() == display)
        return s;
    return nullptr;
  }

  /// The attribute path a display name stands for ("" for the root).
  std::optional<std::string> pathOf(llvm::StringRef display) const {
    llvm::StringRef root = graph_.scopes().root()->displayName();
    if (display == root)
      return std::string();
    if (display.consume_front(root) && display.consume_front(".") && !display.empty())
      return display.str();
    return std::nullopt;
  }

  /// The module stack of a scope, outermost first (without the root), with call indices.
  static llvm::SmallVector<ModuleStackEntry, 4> stackOf(const ModuleScope *s, llvm::ArrayRef<unsigned> calls) {
    llvm::SmallVector<ModuleStackEntry, 4> stack;
    for (; s && s->parent(); s = s->parent())
      stack.insert(stack.begin(), ModuleStackEntry{s->path(), s->type(), 0});
    if (calls.size() == stack.size())
      for (size_t i = 0; i < calls.size(); ++i)
        stack[i].callIndex = calls[i];
    return stack;
  }

  llvm::Error parseScope() {
    llvm::StringRef display = token();
    if (display.empty())
      return fail("expected a scope name");
    if (llvm::Error err = expect(":"))
      return err;
    llvm::StringRef typeText = token();
    std::string type = typeText == "?" ? std::string() : typeText.str();
    ModuleScopeTree &tree = graph_.scopes();
    if (!sawRoot_) {
      sawRoot_ = true;
      tree.setRootType(type);
      if (tree.root()->displayName() != display)
        return fail("the first scope is the root, named after its class '{}': expected '{}', got '{}'", type,
                    tree.root()->displayName(), display.str());
      return llvm::Error::success();
    }
    auto path = pathOf(display);
    if (!path || path->empty())
      return fail("scope '{}' is not '{}.<path>'", display.str(), tree.root()->displayName());
    ModuleScope *parent = tree.root();
    if (consume("in")) {
      if (llvm::Error err = expect("@"))
        return err;
      llvm::StringRef p = token();
      parent = lookupScope(p);
      if (!parent)
        return fail("unknown parent scope '{}'", p.str());
    } else {
      size_t best = 0;
      for (ModuleScope *e : tree.inForwardOrder())
        if (!e->path().empty() && e->path().size() > best && llvm::StringRef(*path).startswith(e->path() + ".")) {
          parent = e;
          best = e->path().size();
        }
    }
    if (lookupScope(display) && lookupScope(display)->parent() == parent)
      return fail("scope '{}' is declared twice", display.str());
    auto stack = stackOf(parent, {});
    stack.push_back({*path, type, 0});
    tree.getOrCreate(stack);
    return llvm::Error::success();
  }

  llvm::Expected<InputKind> inputKind(llvm::StringRef t) {
    for (unsigned i = 0; i <= static_cast<unsigned>(InputKind::ConstantInput); ++i)
      if (name(static_cast<InputKind>(i)) == t)
        return static_cast<InputKind>(i);
    return fail("unknown input kind '{}'", t.str());
  }

  llvm::Error parseInput() {
    InputSpec in;
    skipSpace();
    if (rest_.startswith("%")) {
      auto v = defineValue();
      if (!v)
        return v.takeError();
      in.value = definedValue(*v);
    }
    auto kind = inputKind(token());
    if (!kind)
      return kind.takeError();
    in.kind = *kind;
    auto target = quoted();
    if (!target)
      return target.takeError();
    in.target = std::move(*target);
    if (consume("alias ")) {
      auto alias = quoted();
      if (!alias)
        return alias.takeError();
      in.aliasOf = std::move(*alias);
    }
    if (consume("non_persistent"))
      in.persistent = false;
    graph_.inputs().push_back(std::move(in));
    return llvm::Error::success();
  }

  llvm::Error parseOutput() {
    OutputSpec out;
    llvm::StringRef kindText = token();
    bool known = false;
    for (unsigned i = 0; i <= static_cast<unsigned>(OutputKind::ParameterMutation); ++i)
      if (name(static_cast<OutputKind>(i)) == kindText) {
        out.kind = static_cast<OutputKind>(i);
        known = true;
      }
    if (!known)
      return fail("unknown output kind '{}'", kindText.str());
    auto value = argument();
    if (!value)
      return value.takeError();
    out.value = std::move(*value);
    skipSpace();
    if (rest_.startswith("\"")) {
      auto target = quoted();
      if (!target)
        return target.takeError();
      out.target = std::move(*target);
    }
    graph_.outputs().push_back(std::move(out));
    return llvm::Error::success();
  }

  /// `@SCOPE[#K | #I.J.K]`: the scope and the call path.
  llvm::Error scopeRef(ModuleScope *&scope, llvm::SmallVector<unsigned, 4> &calls, bool *explicitCalls = nullptr) {
    llvm::StringRef display = token();
    scope = lookupScope(display);
    if (!scope)
      return fail("unknown scope '@{}' (declare it with a 'scope' line)", display.str());
    calls.assign(scope->depth(), 0);
    if (explicitCalls)
      *explicitCalls = false;
    if (rest_.consume_front("#")) {
      llvm::StringRef text = token();
      llvm::SmallVector<llvm::StringRef, 4> parts;
      text.split(parts, '.');
      llvm::SmallVector<unsigned, 4> given;
      for (llvm::StringRef p : parts) {
        unsigned c;
        if (p.getAsInteger(10, c))
          return fail("bad call index '#{}'", text.str());
        given.push_back(c);
      }
      if (explicitCalls)
        *explicitCalls = true;
      if (given.size() == 1 && !calls.empty())
        calls.back() = given[0];
      else
        calls = std::move(given);
    }
    return llvm::Error::success();
  }

  llvm::Error parseNode() {
    // Results, up to " = ".
    llvm::SmallVector<Argument, 1> outputs;
    if (!consume("()")) {
      do {
        skipSpace();
        if (rest_.startswith("%")) {
          auto v = defineValue();
          if (!v)
            return v.takeError();
          outputs.push_back(std::move(*v));
        } else if (consume("[")) {
          TensorList l;
          if (!consume("]")) {
            do {
              auto v = defineValue();
              if (!v)
                return v.takeError();
              if (!v->isTensor())
                return fail("a result list holds tensors only");
              l.push_back(v->tensor());
            } while (consume(","));
            if (llvm::Error err = expect("]"))
              return err;
          }
          outputs.push_back(std::move(l));
        } else {
          auto a = argument();
          if (!a)
            return a.takeError();
          outputs.push_back(std::move(*a));
        }
      } while (consume(","));
    }
    if (!consume("="))
      return fail("expected 'RESULTS = OP(ARGS)' or one of program, scope, input, output, call");
    skipSpace();
    size_t paren = rest_.find('(');
    llvm::StringRef op = rest_.take_front(paren).trim();
    if (paren == llvm::StringRef::npos || op.empty() || op.contains(' '))
      return fail("expected 'OP(ARGS)' at '{}'", rest_.str());
    rest_ = rest_.drop_front(paren + 1);
    llvm::SmallVector<NamedArgument, 4> inputs;
    if (llvm::Error err = arguments(inputs))
      return err;
    bool grad = !consume("no_grad");
    ModuleScope *scope = graph_.scopes().root();
    llvm::SmallVector<unsigned, 4> calls;
    if (consume("@"))
      if (llvm::Error err = scopeRef(scope, calls))
        return err;
    std::optional<std::string> nodeName;
    if (consume("name ")) {
      auto n = quoted();
      if (!n)
        return n.takeError();
      nodeName = std::move(*n);
    }
    std::string defaultName;
    // The default name: the first result's, in Node::results() order.
    if (!nodeName) {
      nodeName.emplace();
      for (const Argument &o : outputs) {
        Value *first = o.is<SymIntArg>() || o.is<SymBoolArg>() || o.is<SymFloatArg>() ? definedValue(o)
                       : o.tensors().empty()                                         ? nullptr
                                                                                     : o.tensors().front();
        if (first) {
          *nodeName = first->name();
          break;
        }
      }
    }
    Node *n = graph_.appendNode(*nodeName, op, std::move(inputs), std::move(outputs));
    if (n->op().ns == "commlens") { // the passes trust a boundary op's arguments: checked here
      if (!n->boundaryOp())
        return fail("unknown commlens boundary op '{}' (ir/BoundaryOps.def)", op.str());
      if (llvm::Error err = checkBoundaryArguments(*n->boundaryOp(), n->inputs()))
        return fail("{}: {}", op.str(), takeMessage(std::move(err)));
    }
    n->setGradEnabled(grad);
    if (scope != graph_.scopes().root() || !calls.empty()) {
      // Through the tree, so that each module's call count covers this call.
      graph_.scopes().getOrCreate(stackOf(scope, calls));
      n->setScope(scope, calls);
    }
    return llvm::Error::success();
  }

  /// `ARG, NAME=ARG, ...)`: after the opening parenthesis, through the closing one.
  llvm::Error arguments(llvm::SmallVector<NamedArgument, 4> &out) {
    if (consume(")"))
      return llvm::Error::success();
    do {
      NamedArgument a;
      if (auto k = keyword())
        a.name = std::move(*k);
      auto v = argument();
      if (!v)
        return v.takeError();
      a.value = std::move(*v);
      out.push_back(std::move(a));
    } while (consume(","));
    return expect(")");
  }

  llvm::Error parseCall() {
    pendingCalls_.emplace_back(line_, rest_.str());
    return llvm::Error::success();
  }

  llvm::Error parseCallNow() {
    if (llvm::Error err = expect("@"))
      return err;
    llvm::StringRef display = token();
    auto path = pathOf(display);
    if (!path)
      return fail("call of '@{}', which is not '{}' or '{}.<path>'", display.str(),
                  graph_.scopes().root()->displayName(), graph_.scopes().root()->displayName());
    CallSignature sig;
    sig.path = *path;
    if (rest_.consume_front("#")) {
      llvm::StringRef t = token();
      if (t.getAsInteger(10, sig.call))
        return fail("bad call index '#{}'", t.str());
    }
    if (llvm::Error err = expect("("))
      return err;
    llvm::SmallVector<NamedArgument, 4> args;
    if (llvm::Error err = arguments(args))
      return err;
    for (NamedArgument &a : args) {
      if (a.name.empty()) {
        if (!sig.kwargs.empty())
          return fail("positional argument after a keyword argument");
        sig.args.push_back(std::move(a.value));
      } else {
        sig.kwargs.emplace_back(a.name, std::move(a.value));
      }
    }
    skipSpace();
    if (!rest_.empty())
      return fail("unexpected '{}'", rest_.str());
    graph_.addCallSignature(std::move(sig));
    return llvm::Error::success();
  }

  ExportedProgram &program_;
  Graph &graph_;
  llvm::StringRef rest_;
  unsigned line_ = 0;
  bool sawRoot_ = false;
  std::vector<std::pair<unsigned, std::string>> pendingCalls_;
};

} // namespace

llvm::Expected<std::unique_ptr<ExportedProgram>> parseProgram(llvm::StringRef text) {
  auto program = std::make_unique<ExportedProgram>();
  Parser parser(*program);
  std::unique_ptr<llvm::MemoryBuffer> buffer = llvm::MemoryBuffer::getMemBufferCopy(text, "<ir>");
  for (llvm::line_iterator it(*buffer, /*SkipBlanks=*/false); !it.is_at_end(); ++it)
    if (llvm::Error err = parser.parseLine(*it, static_cast<unsigned>(it.line_number())))
      return err;
  if (llvm::Error err = parser.finish())
    return err;
  return program;
}

llvm::Expected<std::unique_ptr<ExportedProgram>> parseProgramFile(llvm::StringRef path) {
  if (path != "-") // standard input
    if (llvm::Error err = checkInputFile(path, kMaxTextFileBytes))
      return err;
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer)
    return makeError("cannot open file: {}", buffer.getError().message());
  return parseProgram((*buffer)->getBuffer());
}

} // namespace commlens
