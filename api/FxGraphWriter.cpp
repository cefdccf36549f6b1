// The per-node writer of python/commlens/_program_json.py in C++: torch 2.13's serialiser's rules
// (torch/_export/serde/serialize.py, GraphModuleSerializer.serialize_graph and handle_*), the same
// argument variants in the same order of tests, the same result names, getitem users, unused
// results and metadata strings. What the Python side knows once per program or per call target
// (operator schemas, dtype codes, symbolic expressions, rare metadata) it hands over in a context
// object; everything per node is read here through the CPython API.
#include "api/FxGraphWriter.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/StringSet.h>

#include <nanobind/stl/string.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace nb = nanobind;

namespace commlens::python {
namespace {

/// Something the writer does not cover; Python catches it as _program_json.Unsupported.
struct Unsupported {
  std::string message;
};

constexpr int PositionalKind = 1, KeywordKind = 2; // torch._export.serde.schema.ArgumentKind

std::string_view utf8(PyObject *text) {
  Py_ssize_t size;
  const char *data = PyUnicode_AsUTF8AndSize(text, &size);
  if (!data)
    throw nb::python_error();
  return {data, static_cast<size_t>(size)};
}

std::string typeName(PyObject *value) { return Py_TYPE(value)->tp_name; }

/// The inside of a JSON string as Python's json.dumps writes it (ensure_ascii: every non-ASCII
/// code point as \uXXXX, astral ones as surrogate pairs, lower-case hex).
void quoteBody(std::string &out, std::string_view text) {
  static const char hex[] = "0123456789abcdef";
  auto escape = [&](unsigned code) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4)
      out += hex[(code >> shift) & 0xf];
  };
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      size_t end = i + 1; // the run of characters written as they are, appended at once
      while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x20 &&
             static_cast<unsigned char>(text[end]) < 0x7f && text[end] != '"' && text[end] != '\\')
        ++end;
      out.append(text.data() + i, end - i);
      i = end - 1;
      continue;
    }
    switch (c) {
    case '"': out += "\\\""; continue;
    case '\\': out += "\\\\"; continue;
    case '\n': out += "\\n"; continue;
    case '\r': out += "\\r"; continue;
    case '\t': out += "\\t"; continue;
    case '\b': out += "\\b"; continue;
    case '\f': out += "\\f"; continue;
    default: break;
    }
    if (c < 0x80) {
      escape(c);
      continue;
    }
    // Python's str is valid UTF-8 here (PyUnicode_AsUTF8AndSize refuses lone surrogates).
    unsigned length = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    unsigned code = c & (0x7f >> length);
    for (unsigned k = 1; k < length; ++k)
      code = (code << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    i += length - 1;
    if (code > 0xffff) {
      code -= 0x10000;
      escape(0xd800 | (code >> 10));
      escape(0xdc00 | (code & 0x3ff));
    } else {
      escape(code);
    }
  }
}

void quote(std::string &out, std::string_view text) {
  out += '"';
  quoteBody(out, text);
  out += '"';
}

void quote(std::string &out, PyObject *text) { quote(out, utf8(text)); }

/// The interned Python string of an attribute or method name, made once per name (the GIL guards
/// the table; the strings live as long as the process, as interned names do).
PyObject *interned(const char *name) {
  static llvm::DenseMap<const char *, PyObject *> names;
  PyObject *&text = names[name];
  if (!text && !(text = PyUnicode_InternFromString(name)))
    throw nb::python_error();
  return text;
}

/// An attribute read: a new reference, or the Python error raised.
nb::object attr(PyObject *object, const char *name) {
  PyObject *value = PyObject_GetAttr(object, interned(name));
  if (!value)
    throw nb::python_error();
  return nb::steal(value);
}

nb::object call(PyObject *object, const char *method) {
  PyObject *value = PyObject_CallMethodNoArgs(object, interned(method));
  if (!value)
    throw nb::python_error();
  return nb::steal(value);
}

/// Python's int as json.dumps writes it (any size).
void writeInt(std::string &out, PyObject *value) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (v == -1 && PyErr_Occurred())
    throw nb::python_error();
  if (!overflow) {
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
    return;
  }
  PyObject *text = PyObject_Str(value);
  if (!text)
    throw nb::python_error();
  out += utf8(text);
  Py_DECREF(text);
}

/// A float as torch's _dataclass_to_dict leaves it for json.dumps: finite ones by float.__repr__,
/// infinities and NaN as strings.
void writeFloat(std::string &out, PyObject *value) {
  double v = PyFloat_AsDouble(value);
  if (v == -1.0 && PyErr_Occurred())
    throw nb::python_error();
  if (std::isnan(v)) {
    out += "\"NaN\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  } else {
    PyObject *text = PyObject_Repr(value);
    if (!text)
      throw nb::python_error();
    out += utf8(text);
    Py_DECREF(text);
  }
}

/// `{"<variant>":{"as_name":"<name>"}}`: a symbolic value by name.
void writeNamed(std::string &out, const char *variant, std::string_view name) {
  out += "{\"";
  out += variant;
  out += "\":{\"as_name\":";
  quote(out, name);
  out += "}}";
}

/// A node's meta["val"] (borrowed: the node's meta dict holds it), or null where it has none.
PyObject *valueIn(PyObject *meta) {
  PyObject *val = PyDict_GetItemWithError(meta, interned("val"));
  if (!val && PyErr_Occurred())
    throw nb::python_error();
  return val;
}

/// The name torch gives a result no getitem reads: `<node>_unused_<index>`.
std::string unusedName(std::string_view node, long index) {
  return std::string(node) + "_unused_" + std::to_string(index);
}

/// Joins JSON texts with commas, as a list's or an object's members.
struct Members {
  std::string text;
  std::string &next() {
    if (!text.empty())
      text += ',';
    return text;
  }
};

class FxGraphWriter {
public:
  explicit FxGraphWriter(nb::handle context);

  /// The program's JSON document, written once into the bytes object returned: `head`, the top
  /// graph's object (a higher-order op's subgraph written inside it), `middle`, the module call
  /// graph's list, `tail`.
  nb::bytes document(nb::handle graphModule, nb::handle moduleCallGraph, nb::bytes head, nb::bytes middle,
                     nb::bytes tail) {
    GraphState top = run([&] { return fill(graphModule.ptr()); });
    std::string calls = run([&] { return moduleCalls(moduleCallGraph.ptr()); });
    size_t size = head.size() + middle.size() + calls.size() + tail.size();
    forEachPiece(top, [&](std::string_view piece) { size += piece.size(); });
    PyObject *bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (!bytes)
      throw nb::python_error();
    char *at = PyBytes_AS_STRING(bytes);
    auto write = [&](std::string_view piece) {
      std::memcpy(at, piece.data(), piece.size());
      at += piece.size();
    };
    write({head.c_str(), head.size()});
    forEachPiece(top, write);
    write({middle.c_str(), middle.size()});
    write(calls);
    write({tail.c_str(), tail.size()});
    return nb::steal<nb::bytes>(bytes);
  }

  /// One argument spec of the program's signature (a user input or output), as the module
  /// calls' are written.
  std::string argumentSpec(nb::handle spec) {
    return run([&] {
      std::string out;
      writeArgumentSpec(out, spec.ptr());
      return out;
    });
  }

private:
  struct SchemaArgument {
    std::string name;
    nb::object pyName;
    bool kwargOnly;
    std::string emptyVariant; // the variant of an empty list; empty: emptyError says why none
    std::string emptyError;
  };
  struct Operator {
    std::string name;
    bool symOp = false;
    std::vector<std::string> symNames; // argument names of the symbolic branch
    std::string symNamesError;
    bool hasSchema = false;
    std::vector<SchemaArgument> arguments;
    size_t returns = 0;
    bool tensorListReturn = false;
    bool hop = false;
    std::string unsupported; // non-empty: a target the writer does not cover
  };
  /// One graph's values (torch's GraphState).
  struct GraphState {
    Members inputs, outputs, nodes, tensorValues, symIntValues;
    llvm::StringSet<> tensorNames, symInts, symFloats, symBools;
  };

  /// The graph's JSON object, piece by piece.
  template <typename Fn> static void forEachPiece(const GraphState &graph, Fn fn) {
    for (auto [head, part] : {std::pair{"{\"inputs\":[", &graph.inputs.text}, {"],\"outputs\":[", &graph.outputs.text},
                              {"],\"nodes\":[", &graph.nodes.text}, {"],\"tensor_values\":{", &graph.tensorValues.text},
                              {"},\"sym_int_values\":{", &graph.symIntValues.text}}) {
      fn(std::string_view(head));
      fn(std::string_view(*part));
    }
    fn(std::string_view("}}"));
  }

  template <typename Fn> auto run(Fn fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const Unsupported &why) {
      PyErr_SetString(unsupportedType.ptr(), why.message.c_str());
      throw nb::python_error();
    }
  }

  const Operator &operatorOf(PyObject *target);
  GraphState fill(PyObject *graphModule);
  std::string moduleCalls(PyObject *moduleCallGraph);
  void writeArgumentSpec(std::string &out, PyObject *spec);
  const std::string &treespec(PyObject *spec);
  bool treespecKey(PyObject *spec, std::string &key);
  void placeholder(PyObject *node, std::string_view name);
  void output(PyObject *node);
  void callFunction(PyObject *node, PyObject *target, std::string_view name);
  void writeInputs(std::string &out, const Operator &op, PyObject *args, PyObject *kwargs);
  /// One input of a node: {"name", "arg", "kind"}.
  void writeInput(Members &inputs, std::string_view name, PyObject *value, const SchemaArgument *schema, int kind);
  void writeMetadata(std::string &out, PyObject *meta);
  PyObject *userAt(PyObject *node, std::string_view nodeName, long index);
  std::string nameAt(PyObject *node, std::string_view nodeName, long index);
  void writeOutputs(std::string &out, PyObject *node, std::string_view name, PyObject *value, const Operator &op);
  void writeHopOutputs(std::string &out, PyObject *node, std::string_view name, PyObject *value);
  void writeResult(std::string &out, const std::string &name, PyObject *value);
  void writeTensorOutput(std::string &out, const std::string &name, PyObject *tensor);
  void writeSymIntOutput(std::string &out, const std::string &name, PyObject *value);
  void writeSymInt(std::string &out, PyObject *value);
  void writeTensorMeta(std::string &out, PyObject *tensor, const std::string &name);
  void writeArgument(std::string &out, PyObject *arg, const SchemaArgument *schema);
  void writeNodeArgument(std::string &out, PyObject *node);
  void writeListArgument(std::string &out, PyObject *list, const SchemaArgument *schema);
  int code(PyObject *table, PyObject *key, const char *what);
  /// The index of the device in `devices`, added when new.
  size_t deviceOf(nb::object device);

  // Subtype tests (the types' MROs), without a metaclass's __instancecheck__: the values of an
  // exported program are FakeTensors, fx Nodes and Python scalars.
  static bool isA(PyObject *v, const nb::object &type) {
    return PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject *>(type.ptr()));
  }
  bool isNode(PyObject *v) const { return isA(v, nodeType); }
  bool isTensor(PyObject *v) const { return isA(v, tensorType); }
  bool isSymInt(PyObject *v) const { return isA(v, symIntType); }
  bool isSymFloat(PyObject *v) const { return isA(v, symFloatType); }
  bool isSymBool(PyObject *v) const { return isA(v, symBoolType); }

  // What the context gives (python/commlens/_program_json.py's _CONTEXT).
  nb::object nodeType, tensorType, fakeTensorType, symIntType, symFloatType, symBoolType, dtypeType, deviceType,
      memoryFormatType, layoutType, graphModuleType, customObjType, tensorArgumentType, symIntArgumentType,
      symFloatArgumentType, constantArgumentType, getitem, strided, dtypes, layouts, memoryFormats, operatorInfo,
      symIntText, metadataText, treespecText, unsupportedType, commlensError;
  llvm::DenseMap<PyObject *, Operator> operators; // by target (kept alive by the graph)
  llvm::StringMap<std::string> metas; // tensor metadata text by its fields as numbers (concrete sizes)
  llvm::StringMap<std::string> duplicateGetitems; // a getitem's name -> the first getitem of the same result
  llvm::StringMap<std::string> treespecs; // treespec_dumps text by the spec's structure
  std::deque<std::string> unkeyedTreespecs; // of specs with other contexts, written each time
  // Devices met and their JSON: torch.device.type formats a new string at every read.
  std::vector<std::pair<nb::object, std::string>> devices;
  GraphState *state = nullptr;
};

FxGraphWriter::FxGraphWriter(nb::handle context) {
  auto get = [&](const char *name) { return nb::getattr(context, name); };
  nodeType = get("node_type");
  tensorType = get("tensor_type");
  fakeTensorType = get("fake_tensor_type");
  symIntType = get("symint_type");
  symFloatType = get("symfloat_type");
  symBoolType = get("symbool_type");
  dtypeType = get("dtype_type");
  deviceType = get("device_type");
  memoryFormatType = get("memory_format_type");
  layoutType = get("layout_type");
  graphModuleType = get("graph_module_type");
  customObjType = get("custom_obj_type");
  tensorArgumentType = get("tensor_argument_type");
  symIntArgumentType = get("symint_argument_type");
  symFloatArgumentType = get("symfloat_argument_type");
  constantArgumentType = get("constant_argument_type");
  getitem = get("getitem");
  strided = get("strided");
  dtypes = get("dtypes");
  layouts = get("layouts");
  memoryFormats = get("memory_formats");
  operatorInfo = get("operator_info");
  symIntText = get("sym_int_text");
  metadataText = get("metadata_text");
  treespecText = get("treespec_text");
  unsupportedType = get("unsupported");
  commlensError = get("commlens_error");
}

int FxGraphWriter::code(PyObject *table, PyObject *key, const char *what) {
  PyObject *value = PyDict_GetItemWithError(table, key);
  if (!value) {
    if (PyErr_Occurred())
      throw nb::python_error();
    throw Unsupported{std::string(what) + " " + std::string(utf8(nb::str(key).ptr()))};
  }
  return static_cast<int>(PyLong_AsLong(value));
}

size_t FxGraphWriter::deviceOf(nb::object device) {
  for (size_t i = 0; i < devices.size(); ++i) {
    int same = PyObject_RichCompareBool(devices[i].first.ptr(), device.ptr(), Py_EQ);
    if (same < 0)
      throw nb::python_error();
    if (same)
      return i;
  }
  std::string text = "{\"type\":";
  quote(text, attr(device.ptr(), "type").ptr());
  text += ",\"index\":";
  nb::object index = attr(device.ptr(), "index");
  if (index.is_none())
    text += "null";
  else
    writeInt(text, index.ptr());
  text += '}';
  devices.emplace_back(std::move(device), std::move(text));
  return devices.size() - 1;
}

std::string FxGraphWriter::moduleCalls(PyObject *moduleCallGraph) {
  // The module call graph: each entry's fqn and signature (its inputs and in_spec; the decoder
  // reads nothing else of it).
  nb::object entries = nb::steal(PySequence_Fast(moduleCallGraph, "the module call graph"));
  if (!entries)
    throw nb::python_error();
  std::string out = "[";
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(entries.ptr()); ++i) {
    PyObject *entry = PySequence_Fast_GET_ITEM(entries.ptr(), i);
    if (i)
      out += ',';
    out += "{\"fqn\":";
    quote(out, attr(entry, "fqn").ptr());
    out += ",\"signature\":";
    nb::object signature = attr(entry, "signature");
    if (signature.is_none()) {
      out += "null}";
      continue;
    }
    out += "{\"inputs\":[";
    nb::object inputs = nb::steal(PySequence_Fast(attr(signature.ptr(), "inputs").ptr(), "a signature's inputs"));
    if (!inputs)
      throw nb::python_error();
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(inputs.ptr()); ++k) {
      if (k)
        out += ',';
      writeArgumentSpec(out, PySequence_Fast_GET_ITEM(inputs.ptr(), k));
    }
    out += "],\"in_spec\":";
    quote(out, treespec(attr(signature.ptr(), "in_spec").ptr()));
    out += "}}";
  }
  out += ']';
  return out;
}

void FxGraphWriter::writeArgumentSpec(std::string &out, PyObject *spec) {
  // serialize_argument_spec
  const char *variant = isA(spec, tensorArgumentType)   ? "{\"as_tensor\":{\"name\":"
                        : isA(spec, symIntArgumentType)   ? "{\"as_sym_int\":{\"as_name\":"
                        : isA(spec, symFloatArgumentType) ? "{\"as_sym_float\":{\"as_name\":"
                                                          : nullptr;
  if (variant) {
    out += variant;
    quote(out, attr(spec, "name").ptr());
    out += "}}";
  } else if (isA(spec, constantArgumentType)) {
    writeArgument(out, attr(spec, "value").ptr(), nullptr);
  } else {
    throw Unsupported{"argument spec of type " + typeName(spec)};
  }
}

bool FxGraphWriter::treespecKey(PyObject *spec, std::string &key) {
  // The structure treespec_dumps writes: each node's type (by identity), its context where it is
  // None, a str or a list of str (a dict's keys), and its children. Anything else: no key.
  PyObject *type = PyObject_GetAttr(spec, interned("type"));
  PyObject *context = type ? PyObject_GetAttr(spec, interned("_context")) : nullptr;
  PyObject *children = context ? PyObject_GetAttr(spec, interned("_children")) : nullptr;
  nb::object owned[] = {nb::steal(type), nb::steal(context), nb::steal(children)};
  if (!children || !PyList_Check(children)) {
    PyErr_Clear();
    return false;
  }
  key.append(reinterpret_cast<const char *>(&type), sizeof type);
  auto text = [&](PyObject *s) {
    std::string_view v = utf8(s);
    size_t n = v.size();
    key.append(reinterpret_cast<const char *>(&n), sizeof n);
    key += v;
  };
  if (context == Py_None) {
    key += 'N';
  } else if (PyUnicode_Check(context)) {
    key += 'S';
    text(context);
  } else if (PyList_Check(context)) {
    key += 'L';
    size_t n = PyList_GET_SIZE(context);
    key.append(reinterpret_cast<const char *>(&n), sizeof n);
    for (size_t i = 0; i < n; ++i) {
      if (!PyUnicode_Check(PyList_GET_ITEM(context, i)))
        return false;
      text(PyList_GET_ITEM(context, i));
    }
  } else {
    return false;
  }
  size_t n = PyList_GET_SIZE(children);
  key.append(reinterpret_cast<const char *>(&n), sizeof n);
  for (size_t i = 0; i < n; ++i)
    if (!treespecKey(PyList_GET_ITEM(children, i), key))
      return false;
  return true;
}

const std::string &FxGraphWriter::treespec(PyObject *spec) {
  std::string key;
  bool keyed = treespecKey(spec, key);
  if (keyed) {
    auto found = treespecs.find(key);
    if (found != treespecs.end())
      return found->second;
  }
  std::string text(utf8(nb::cast<nb::str>(treespecText(nb::handle(spec))).ptr()));
  if (!keyed)
    return unkeyedTreespecs.emplace_back(std::move(text));
  return treespecs.try_emplace(key, std::move(text)).first->second;
}

const FxGraphWriter::Operator &FxGraphWriter::operatorOf(PyObject *target) {
  auto found = operators.find(target);
  if (found != operators.end())
    return found->second;
  // (name, sym_op, sym_names or None, sym_names_error, arguments or None, returns, tensor_list_return, hop,
  //  unsupported); arguments: (name, kwarg_only, empty-list variant, why no variant)
  nb::tuple info = nb::cast<nb::tuple>(operatorInfo(nb::handle(target)));
  Operator op;
  op.name = nb::cast<std::string>(info[0]);
  op.symOp = nb::cast<bool>(info[1]);
  if (!info[2].is_none())
    for (nb::handle n : info[2])
      op.symNames.push_back(nb::cast<std::string>(n));
  op.symNamesError = nb::cast<std::string>(info[3]);
  if (!info[4].is_none()) {
    op.hasSchema = true;
    for (nb::handle a : info[4]) {
      nb::tuple t = nb::cast<nb::tuple>(a);
      op.arguments.push_back({nb::cast<std::string>(t[0]), nb::borrow(t[0]), nb::cast<bool>(t[1]),
                              nb::cast<std::string>(t[2]), nb::cast<std::string>(t[3])});
    }
  }
  op.returns = nb::cast<size_t>(info[5]);
  op.tensorListReturn = nb::cast<bool>(info[6]);
  op.hop = nb::cast<bool>(info[7]);
  op.unsupported = nb::cast<std::string>(info[8]);
  return operators.try_emplace(target, std::move(op)).first->second;
}

FxGraphWriter::GraphState FxGraphWriter::fill(PyObject *graphModule) {
  GraphState graphState;
  GraphState *saved = state;
  state = &graphState;
  struct Restore {
    GraphState *&state, *saved;
    ~Restore() { state = saved; }
  } restore{state, saved};

  nb::object nodes = attr(attr(graphModule, "graph").ptr(), "nodes");
  Py_ssize_t count = PyObject_Size(nodes.ptr());
  if (count < 0)
    throw nb::python_error();
  graphState.nodes.text.reserve(count * 640); // about what a node of a transformer takes
  graphState.tensorValues.text.reserve(count * 200);
  nb::object iterator = nb::steal(PyObject_GetIter(nodes.ptr()));
  if (!iterator)
    throw nb::python_error();
  while (PyObject *raw = PyIter_Next(iterator.ptr())) {
    nb::object node = nb::steal(raw);
    nb::object op = attr(raw, "op");
    nb::object name = attr(raw, "name");
    std::string_view kind = utf8(op.ptr());
    if (kind == "call_function") {
      nb::object target = attr(raw, "target");
      callFunction(raw, target.ptr(), utf8(name.ptr()));
    } else if (kind == "placeholder") {
      placeholder(raw, utf8(name.ptr()));
    } else if (kind == "output") {
      output(raw);
    } else if (kind != "get_attr") {
      throw Unsupported{std::string(kind) + " node " + std::string(utf8(name.ptr()))};
    }
  }
  if (PyErr_Occurred())
    throw nb::python_error();
  return graphState;
}

void FxGraphWriter::placeholder(PyObject *node, std::string_view nameView) {
  std::string name(nameView);
  PyObject *val = valueIn(attr(node, "meta").ptr());
  if (!val)
    throw Unsupported{"graph input " + name + " without a value"};
  std::string &out = state->inputs.next();
  if (isTensor(val)) {
    out += "{\"as_tensor\":";
    writeTensorOutput(out, name, val);
    out += '}';
  } else if (isSymInt(val)) {
    out += "{\"as_sym_int\":";
    writeSymIntOutput(out, name, val);
    out += '}';
  } else if (PyLong_Check(val) || PyUnicode_Check(val) || PyFloat_Check(val) || val == Py_None) {
    writeArgument(out, val, nullptr);
  } else {
    throw Unsupported{"graph input " + name + " of type " + typeName(val)};
  }
}

void FxGraphWriter::output(PyObject *node) {
  nb::object args = attr(node, "args");
  if (PyTuple_GET_SIZE(args.ptr()) != 1)
    throw Unsupported{"an output node of several arguments"};
  PyObject *results = PyTuple_GET_ITEM(args.ptr(), 0);
  state->outputs.text.clear(); // the last output node is the graph's
  if (isNode(results)) {
    writeArgument(state->outputs.next(), results, nullptr);
    return;
  }
  nb::object sequence = nb::steal(PySequence_Fast(results, "the output node's results"));
  if (!sequence)
    throw nb::python_error();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence.ptr()); ++i)
    writeArgument(state->outputs.next(), PySequence_Fast_GET_ITEM(sequence.ptr(), i), nullptr);
}

void FxGraphWriter::callFunction(PyObject *node, PyObject *target, std::string_view name) {
  if (target == getitem.ptr()) // its producer names it
    return;
  nb::object meta = attr(node, "meta");
  PyObject *metaVal = valueIn(meta.ptr()); // null: no value recorded
  const Operator &op = operatorOf(target);
  // The fields behind Node.args / Node.kwargs (Python properties, a tenth of the walk's reads).
  nb::object args = attr(node, "_args");
  nb::object kwargs = attr(node, "_kwargs");
  std::string nodeName(name);

  std::string &text = state->nodes.next();
  text += "{\"target\":";
  quote(text, op.name);
  text += ",\"inputs\":[";
  bool symbolic = metaVal && (isSymInt(metaVal) || isSymBool(metaVal) || isSymFloat(metaVal));
  if (op.symOp || symbolic) {
    if (PyDict_GET_SIZE(kwargs.ptr()))
      throw Unsupported{"symbolic op " + nodeName + " with keyword arguments"};
    if (!op.symNamesError.empty())
      throw Unsupported{op.symNamesError};
    Members inputs;
    Py_ssize_t count = PyTuple_GET_SIZE(args.ptr());
    for (Py_ssize_t i = 0; i < count && static_cast<size_t>(i) < op.symNames.size(); ++i)
      writeInput(inputs, op.symNames[i], PyTuple_GET_ITEM(args.ptr(), i), nullptr, PositionalKind);
    text += inputs.text;
    text += "],\"outputs\":[";
    writeResult(text, nodeName, metaVal ? metaVal : Py_None);
  } else if (op.hasSchema) {
    writeInputs(text, op, args.ptr(), kwargs.ptr());
    text += "],\"outputs\":[";
    writeOutputs(text, node, nodeName, metaVal, op);
  } else if (op.hop) {
    if (!op.unsupported.empty())
      throw Unsupported{op.unsupported};
    Members inputs;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args.ptr()); ++i)
      writeInput(inputs, "", PyTuple_GET_ITEM(args.ptr(), i), nullptr, PositionalKind);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs.ptr(), &pos, &key, &value))
      writeInput(inputs, utf8(key), value, nullptr, KeywordKind);
    text += inputs.text;
    text += "],\"outputs\":[";
    writeHopOutputs(text, node, nodeName, metaVal ? metaVal : Py_None);
  } else {
    throw Unsupported{op.unsupported};
  }
  text += "],\"metadata\":";
  writeMetadata(text, meta.ptr());
  text += ",\"name\":";
  quote(text, nodeName);
  text += '}';
}

void FxGraphWriter::writeInputs(std::string &out, const Operator &op, PyObject *args, PyObject *kwargs) {
  // serialize_inputs: the schema's arguments given by keyword or position; defaults are not written.
  Members inputs;
  Py_ssize_t count = PyTuple_GET_SIZE(args);
  for (size_t i = 0; i < op.arguments.size(); ++i) {
    const SchemaArgument &a = op.arguments[i];
    PyObject *value = PyDict_GetItemWithError(kwargs, a.pyName.ptr());
    int kind = KeywordKind;
    if (!value) {
      if (PyErr_Occurred())
        throw nb::python_error();
      if (a.kwargOnly || static_cast<Py_ssize_t>(i) >= count)
        continue;
      value = PyTuple_GET_ITEM(args, i);
      kind = PositionalKind;
    }
    writeInput(inputs, a.name, value, &a, kind);
  }
  out += inputs.text;
}

void FxGraphWriter::writeInput(Members &inputs, std::string_view name, PyObject *value, const SchemaArgument *schema,
                               int kind) {
  std::string &text = inputs.next();
  text += "{\"name\":";
  quote(text, name);
  text += ",\"arg\":";
  writeArgument(text, value, schema);
  text += ",\"kind\":" + std::to_string(kind) + "}";
}

void FxGraphWriter::writeMetadata(std::string &out, PyObject *meta) {
  // serialize_metadata: each key written only where the value is truthy.
  out += '{';
  size_t start = out.size();
  auto truthy = [&](const char *key) -> PyObject * {
    PyObject *value = PyDict_GetItemWithError(meta, interned(key));
    if (!value) {
      if (PyErr_Occurred())
        throw nb::python_error();
      return nullptr;
    }
    int yes = PyObject_IsTrue(value);
    if (yes < 0)
      throw nb::python_error();
    return yes ? value : nullptr;
  };
  auto field = [&](const char *key) -> std::string & {
    std::string &text = out;
    if (text.size() != start)
      text += ',';
    text += '"';
    text += key;
    text += "\":";
    return text;
  };
  auto viaPython = [&](const char *key, PyObject *value) {
    quote(field(key), nb::cast<nb::str>(metadataText(key, nb::handle(value))).ptr());
  };
  if (PyObject *stackTrace = truthy("stack_trace"))
    quote(field("stack_trace"), nb::str(nb::handle(stackTrace)).ptr());
  if (PyObject *stack = truthy("nn_module_stack")) {
    if (!PyDict_Check(stack))
      throw Unsupported{"nn_module_stack of type " + typeName(stack)};
    std::string &text = field("nn_module_stack");
    nb::object converted; // str() of a part that is not a str (f-string formatting)
    auto textOf = [&](PyObject *part) {
      if (PyUnicode_Check(part))
        return utf8(part);
      converted = nb::str(nb::handle(part));
      return utf8(converted.ptr());
    };
    text += '"';
    PyObject *key, *entry;
    Py_ssize_t pos = 0;
    bool first = true;
    while (PyDict_Next(stack, &pos, &key, &entry)) {
      if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2)
        throw Unsupported{"an nn_module_stack entry of type " + typeName(entry)};
      if (!first)
        text += ';';
      first = false;
      quoteBody(text, textOf(key));
      text += ',';
      quoteBody(text, textOf(PyTuple_GET_ITEM(entry, 0)));
      text += ',';
      quoteBody(text, textOf(PyTuple_GET_ITEM(entry, 1)));
    }
    text += '"';
  }
  if (PyObject *sourceFns = truthy("source_fn_stack"))
    viaPython("source_fn_stack", sourceFns);
  if (PyObject *torchFn = truthy("torch_fn")) {
    nb::object sequence = nb::steal(PySequence_Fast(torchFn, "torch_fn"));
    if (!sequence)
      throw nb::python_error();
    std::string &text = field("torch_fn");
    text += '"';
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence.ptr()); ++i) {
      if (i)
        text += ';';
      quoteBody(text, utf8(PySequence_Fast_GET_ITEM(sequence.ptr(), i)));
    }
    text += '"';
  }
  if (PyObject *custom = truthy("custom"))
    viaPython("custom", custom);
  if (PyObject *fromNode = PyDict_GetItemWithError(meta, interned("from_node")))
    viaPython("from_node", fromNode);
  out += '}';
}

PyObject *FxGraphWriter::userAt(PyObject *node, std::string_view nodeName, long index) {
  // _output_node_at_index: the getitem of result `index`; a second getitem of it is a duplicate.
  nb::object users = attr(node, "users");
  PyObject *found = nullptr;
  PyObject *user, *ignored;
  Py_ssize_t pos = 0;
  while (PyDict_Next(users.ptr(), &pos, &user, &ignored)) {
    nb::object target = attr(user, "target");
    if (target.ptr() != getitem.ptr())
      throw Unsupported{std::string(utf8(attr(user, "name").ptr())) + " uses the results of " +
                        std::string(nodeName) + " other than by getitem"};
    nb::object args = attr(user, "args");
    long at = PyLong_AsLong(PyTuple_GET_ITEM(args.ptr(), 1));
    if (at == -1 && PyErr_Occurred())
      throw nb::python_error();
    if (at != index)
      continue;
    if (!found)
      found = user;
    else
      duplicateGetitems[utf8(attr(user, "name").ptr())] = std::string(utf8(attr(found, "name").ptr()));
  }
  return found; // borrowed: users keys live as long as the graph
}

std::string FxGraphWriter::nameAt(PyObject *node, std::string_view nodeName, long index) {
  PyObject *user = userAt(node, nodeName, index);
  if (!user)
    return unusedName(nodeName, index);
  return std::string(utf8(attr(user, "name").ptr()));
}

void FxGraphWriter::writeOutputs(std::string &out, PyObject *node, std::string_view name, PyObject *metaVal,
                                 const Operator &op) {
  if (op.returns == 0)
    return;
  std::string nodeName(name);
  if (!metaVal)
    throw Unsupported{"node " + nodeName + " without a value"};
  if (op.tensorListReturn) {
    nb::object list = nb::steal(PySequence_Fast(metaVal, "a tensor list result"));
    if (!list)
      throw nb::python_error();
    out += "{\"as_tensors\":[";
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(list.ptr()); ++i) {
      if (i)
        out += ',';
      writeTensorOutput(out, nameAt(node, name, i), PySequence_Fast_GET_ITEM(list.ptr(), i));
    }
    out += "]}";
    return;
  }
  if (op.returns == 1) {
    writeResult(out, nodeName, metaVal);
    return;
  }
  nb::object results = nb::steal(PySequence_Fast(metaVal, "a multi-result value"));
  if (!results)
    throw nb::python_error();
  Members outputs;
  Py_ssize_t count = std::min<Py_ssize_t>(PySequence_Fast_GET_SIZE(results.ptr()), op.returns);
  for (Py_ssize_t index = 0; index < count; ++index) {
    PyObject *m = PySequence_Fast_GET_ITEM(results.ptr(), index);
    std::string &text = outputs.next();
    if (m == Py_None) {
      text += "{\"as_none\":true}";
    } else if (isTensor(m)) {
      writeResult(text, nameAt(node, name, index), m);
    } else if (PyList_Check(m)) {
      PyObject *user = userAt(node, name, index);
      std::string userName = user ? std::string(utf8(attr(user, "name").ptr())) : std::string();
      text += "{\"as_tensors\":[";
      bool first = true;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(m); ++i) {
        PyObject *item = PyList_GET_ITEM(m, i);
        if (item == Py_None)
          continue;
        if (!first)
          text += ',';
        first = false;
        std::string itemName =
            user ? nameAt(user, userName, i) : unusedName(nodeName, index) + "_" + std::to_string(i);
        writeTensorOutput(text, itemName, item);
      }
      text += "]}";
    } else if (PyLong_Check(m) || PyFloat_Check(m)) {
      writeResult(text, nameAt(node, name, index), m);
    } else {
      throw Unsupported{"result " + std::to_string(index) + " of " + nodeName + " of type " + typeName(m)};
    }
  }
  out += outputs.text;
}

void FxGraphWriter::writeHopOutputs(std::string &out, PyObject *node, std::string_view name, PyObject *metaVal) {
  std::string nodeName(name);
  if (PyDict_Check(metaVal))
    throw Unsupported{"higher-order op " + nodeName + " with a dict result"};
  if (!PyTuple_Check(metaVal)) {
    writeResult(out, nodeName, metaVal);
    return;
  }
  Members outputs;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(metaVal); ++i) {
    PyObject *m = PyTuple_GET_ITEM(metaVal, i);
    PyObject *user = userAt(node, name, i);
    std::string userName = user ? std::string(utf8(attr(user, "name").ptr())) : std::string();
    std::string &text = outputs.next();
    if (PyList_Check(m)) {
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(m); ++j)
        if (!isTensor(PyList_GET_ITEM(m, j)))
          throw Unsupported{"higher-order op " + nodeName + " with a list result of non-tensors"};
      text += "{\"as_tensors\":[";
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(m); ++j) {
        if (j)
          text += ',';
        std::string itemName =
            user ? nameAt(user, userName, j) : unusedName(nodeName, i) + "_" + std::to_string(j);
        writeTensorOutput(text, itemName, PyList_GET_ITEM(m, j));
      }
      text += "]}";
    } else {
      writeResult(text, user ? userName : unusedName(nodeName, i), m);
    }
  }
  out += outputs.text;
}

void FxGraphWriter::writeResult(std::string &out, const std::string &name, PyObject *value) {
  if (value == Py_None) {
    out += "{\"as_none\":true}";
  } else if (isTensor(value)) {
    out += "{\"as_tensor\":";
    writeTensorOutput(out, name, value);
    out += '}';
  } else if (PyBool_Check(value) || isSymBool(value)) {
    state->symBools.insert(name);
    writeNamed(out, "as_sym_bool", name);
  } else if (PyLong_Check(value) || isSymInt(value)) {
    out += "{\"as_sym_int\":";
    writeSymIntOutput(out, name, value);
    out += '}';
  } else if (PyFloat_Check(value) || isSymFloat(value)) {
    state->symFloats.insert(name);
    writeNamed(out, "as_sym_float", name);
  } else {
    throw Unsupported{"result " + name + " of type " + typeName(value)};
  }
}

void FxGraphWriter::writeTensorOutput(std::string &out, const std::string &name, PyObject *tensor) {
  if (!state->tensorNames.insert(name).second)
    throw Unsupported{"tensor " + name + " is defined twice"};
  std::string &text = state->tensorValues.next();
  quote(text, name);
  text += ':';
  writeTensorMeta(text, tensor, name);
  out += "{\"name\":";
  quote(out, name);
  out += '}';
}

void FxGraphWriter::writeSymIntOutput(std::string &out, const std::string &name, PyObject *value) {
  if (!state->symInts.insert(name).second)
    throw Unsupported{"SymInt " + name + " is defined twice"};
  std::string &text = state->symIntValues.next();
  quote(text, name);
  text += ':';
  writeSymInt(text, value);
  out += "{\"as_name\":";
  quote(out, name);
  out += '}';
}

void FxGraphWriter::writeSymInt(std::string &out, PyObject *value) {
  // serialize_sym_int: a plain int here, a SymInt (concrete or an expression) by Python.
  if (PyLong_CheckExact(value)) {
    out += "{\"as_int\":";
    writeInt(out, value);
    out += '}';
  } else {
    out += utf8(nb::cast<nb::str>(symIntText(nb::handle(value))).ptr());
  }
}

void FxGraphWriter::writeTensorMeta(std::string &out, PyObject *tensor, const std::string &name) {
  // serialize_tensor_meta, written once per distinct metadata of concrete sizes.
  nb::object layout = attr(tensor, "layout");
  if (layout.ptr() != strided.ptr()) { // neither writer can give it strides (torch's raises)
    nb::object error = commlensError("program", "tensor '" + name + "' has layout " +
                                                    std::string(utf8(nb::str(layout).ptr())) +
                                                    ": commlens models strided tensors only");
    PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(error.ptr())), error.ptr());
    throw nb::python_error();
  }
  nb::object dtype = attr(tensor, "dtype");
  nb::object sizes = attr(tensor, "shape");
  nb::object strides = call(tensor, "stride");
  nb::object offset = call(tensor, "storage_offset");
  nb::object requiresGrad = attr(tensor, "requires_grad");
  // A FakeTensor's device property returns its fake_device outside fake kernels: read directly.
  size_t deviceIndex = deviceOf(attr(tensor, isA(tensor, fakeTensorType) ? "fake_device" : "device"));
  const std::string &deviceText = devices[deviceIndex].second;
  int dtypeCode = code(dtypes.ptr(), dtype.ptr(), "dtype");
  int layoutCode = code(layouts.ptr(), layout.ptr(), "layout");

  // The cache key: the fields as numbers (sizes, strides and offset plain ints that fit).
  llvm::SmallVector<int64_t, 24> key{dtypeCode, layoutCode, requiresGrad.ptr() == Py_True,
                                     static_cast<int64_t>(deviceIndex), PyTuple_GET_SIZE(sizes.ptr())};
  bool concrete = true;
  for (PyObject *value : {sizes.ptr(), strides.ptr(), offset.ptr()}) {
    bool tuple = PyTuple_Check(value);
    Py_ssize_t count = tuple ? PyTuple_GET_SIZE(value) : 1;
    for (Py_ssize_t i = 0; i < count && concrete; ++i) {
      PyObject *item = tuple ? PyTuple_GET_ITEM(value, i) : value;
      int overflow = 0;
      long long v = PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
      concrete = PyLong_CheckExact(item) && !overflow;
      key.push_back(v);
    }
  }
  auto writeInts = [&](std::string &text, PyObject *tuple) {
    text += '[';
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
      if (i)
        text += ',';
      writeSymInt(text, PyTuple_GET_ITEM(tuple, i));
    }
    text += ']';
  };
  auto writeMeta = [&](std::string &text) {
    text += "{\"dtype\":" + std::to_string(dtypeCode) + ",\"sizes\":";
    writeInts(text, sizes.ptr());
    text += ",\"requires_grad\":";
    text += requiresGrad.ptr() == Py_True ? "true" : "false";
    text += ",\"device\":";
    text += deviceText;
    text += ",\"strides\":";
    writeInts(text, strides.ptr());
    text += ",\"storage_offset\":";
    writeSymInt(text, offset.ptr());
    text += ",\"layout\":" + std::to_string(layoutCode) + "}";
  };
  if (!concrete)
    return writeMeta(out);
  auto [entry, inserted] =
      metas.try_emplace(llvm::StringRef(reinterpret_cast<const char *>(key.data()), key.size() * sizeof(int64_t)));
  if (inserted)
    writeMeta(entry->second);
  out += entry->second;
}

void FxGraphWriter::writeArgument(std::string &out, PyObject *arg, const SchemaArgument *schema) {
  if (isNode(arg))
    return writeNodeArgument(out, arg);
  if (isSymInt(arg) || isSymFloat(arg))
    return writeNamed(out, isSymInt(arg) ? "as_sym_int" : "as_sym_float", utf8(nb::str(nb::handle(arg)).ptr()));
  PyTypeObject *kind = Py_TYPE(arg);
  if (kind == &PyBool_Type) {
    out += arg == Py_True ? "{\"as_bool\":true}" : "{\"as_bool\":false}";
  } else if (kind == &PyUnicode_Type) {
    out += "{\"as_string\":";
    quote(out, arg);
    out += '}';
  } else if (kind == &PyLong_Type) {
    out += "{\"as_int\":";
    writeInt(out, arg);
    out += '}';
  } else if (kind == &PyFloat_Type) {
    out += "{\"as_float\":";
    writeFloat(out, arg);
    out += '}';
  } else if (kind == &PyComplex_Type) {
    nb::object real = nb::steal(PyFloat_FromDouble(PyComplex_RealAsDouble(arg)));
    nb::object imag = nb::steal(PyFloat_FromDouble(PyComplex_ImagAsDouble(arg)));
    out += "{\"as_complex\":{\"real\":";
    writeFloat(out, real.ptr());
    out += ",\"imag\":";
    writeFloat(out, imag.ptr());
    out += "}}";
  } else if (arg == Py_None) {
    out += "{\"as_none\":true}";
  } else if (PyList_Check(arg) || PyTuple_Check(arg)) {
    writeListArgument(out, arg, schema);
  } else if (isA(arg, dtypeType)) {
    out += "{\"as_scalar_type\":" + std::to_string(code(dtypes.ptr(), arg, "dtype")) + "}";
  } else if (isA(arg, deviceType)) {
    out += "{\"as_device\":";
    out += devices[deviceOf(nb::borrow(arg))].second;
    out += '}';
  } else if (isA(arg, memoryFormatType)) {
    out += "{\"as_memory_format\":" + std::to_string(code(memoryFormats.ptr(), arg, "memory format")) + "}";
  } else if (isA(arg, layoutType)) {
    out += "{\"as_layout\":" + std::to_string(code(layouts.ptr(), arg, "layout")) + "}";
  } else {
    throw Unsupported{"argument of type " + typeName(arg)};
  }
}

void FxGraphWriter::writeNodeArgument(std::string &out, PyObject *node) {
  nb::object nameObject = attr(node, "name");
  std::string name(utf8(nameObject.ptr()));
  if (utf8(attr(node, "op").ptr()) == "get_attr") {
    nb::object target = attr(node, "target");
    nb::object owner = attr(attr(node, "graph").ptr(), "owning_module");
    nb::object module = nb::steal(PyObject_GetAttr(owner.ptr(), target.ptr()));
    if (!module)
      throw nb::python_error();
    if (!isA(module.ptr(), graphModuleType))
      throw Unsupported{"get_attr " + std::string(utf8(target.ptr())) + " of type " + typeName(module.ptr())};
    out += "{\"as_graph\":{\"name\":";
    quote(out, target.ptr());
    out += ",\"graph\":";
    forEachPiece(fill(module.ptr()), [&](std::string_view piece) { out += piece; });
    out += "}}";
    return;
  }
  const char *variant = state->symInts.contains(name)    ? "as_sym_int"
                        : state->symFloats.contains(name) ? "as_sym_float"
                        : state->symBools.contains(name)  ? "as_sym_bool"
                                                          : nullptr;
  if (variant) {
    writeNamed(out, variant, name);
    return;
  }
  PyObject *val = valueIn(attr(node, "meta").ptr());
  if (val && isA(val, customObjType))
    throw Unsupported{"custom object argument " + name};
  auto duplicate = duplicateGetitems.find(name);
  out += "{\"as_tensor\":{\"name\":";
  quote(out, duplicate == duplicateGetitems.end() ? name : duplicate->second);
  out += "}}";
}

void FxGraphWriter::writeListArgument(std::string &out, PyObject *list, const SchemaArgument *schema) {
  nb::object sequence = nb::steal(PySequence_Fast(list, "a list argument"));
  if (!sequence)
    throw nb::python_error();
  Py_ssize_t size = PySequence_Fast_GET_SIZE(sequence.ptr());
  PyObject **items = PySequence_Fast_ITEMS(sequence.ptr());
  if (size == 0) {
    // empty_list_variant: as_tensors (torch's default) where no schema says
    if (schema && schema->emptyVariant.empty())
      throw Unsupported{schema->emptyError};
    out += "{\"";
    out += schema ? schema->emptyVariant : std::string("as_tensors");
    out += "\":[]}";
    return;
  }
  auto all = [&](auto predicate) {
    for (Py_ssize_t i = 0; i < size; ++i)
      if (!predicate(items[i]))
        return false;
    return true;
  };
  auto exactly = [&](PyTypeObject *type) { return all([&](PyObject *a) { return Py_TYPE(a) == type; }); };
  auto symIntNode = [&](PyObject *a) {
    return isNode(a) && state->symInts.contains(utf8(attr(a, "name").ptr()));
  };
  auto members = [&](const char *variant, auto writeOne) {
    out += "{\"";
    out += variant;
    out += "\":[";
    for (Py_ssize_t i = 0; i < size; ++i) {
      if (i)
        out += ',';
      writeOne(items[i]);
    }
    out += "]}";
  };
  auto unsupported = [&] {
    std::vector<std::string> kinds;
    for (Py_ssize_t i = 0; i < size; ++i)
      kinds.push_back(typeName(items[i]));
    llvm::sort(kinds);
    kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
    std::string names;
    for (const std::string &k : kinds)
      names += (names.empty() ? "'" : ", '") + k + "'";
    return Unsupported{"list argument of [" + names + "]"};
  };
  if (exactly(&PyBool_Type))
    return members("as_bools", [&](PyObject *a) { out += a == Py_True ? "true" : "false"; });
  if (exactly(&PyLong_Type))
    return members("as_ints", [&](PyObject *a) { writeInt(out, a); });
  if (exactly(&PyFloat_Type))
    return members("as_floats", [&](PyObject *a) { writeFloat(out, a); });
  if (exactly(&PyUnicode_Type))
    return members("as_strings", [&](PyObject *a) { quote(out, a); });
  // ints with SymInts (named by str()) or with nodes of SymInt values (by the node's name)
  auto symInts = [&](auto nameOf) {
    members("as_sym_ints", [&](PyObject *a) {
      if (Py_TYPE(a) == &PyLong_Type) {
        out += "{\"as_int\":";
        writeInt(out, a);
      } else {
        out += "{\"as_name\":";
        quote(out, nameOf(a).ptr());
      }
      out += '}';
    });
  };
  if (all([&](PyObject *a) { return Py_TYPE(a) == &PyLong_Type || isSymInt(a); }))
    return symInts([](PyObject *a) { return nb::object(nb::str(nb::handle(a))); });
  if (all([&](PyObject *a) { return Py_TYPE(a) == &PyLong_Type || symIntNode(a); }))
    return symInts([](PyObject *a) { return attr(a, "name"); });
  for (Py_ssize_t i = 0; i < size; ++i) {
    PyObject *a = items[i];
    if (isNode(a)) {
      std::string_view name = utf8(attr(a, "name").ptr());
      if (state->symFloats.contains(name) || state->symBools.contains(name))
        throw unsupported();
    } else if (isSymFloat(a) || PyFloat_Check(a) || PyBool_Check(a)) {
      throw unsupported();
    }
  }
  if (all([&](PyObject *a) { return isNode(a); })) {
    for (Py_ssize_t i = 0; i < size; ++i)
      if (utf8(attr(items[i], "op").ptr()) == "get_attr")
        throw Unsupported{"a list argument of get_attr nodes"};
    return members("as_tensors", [&](PyObject *a) {
      out += "{\"name\":";
      quote(out, attr(a, "name").ptr());
      out += '}';
    });
  }
  if (all([&](PyObject *a) { return a == Py_None || isNode(a); }))
    return members("as_optional_tensors", [&](PyObject *a) {
      if (a == Py_None) {
        out += "{\"as_none\":true}";
      } else {
        out += "{\"as_tensor\":{\"name\":";
        quote(out, attr(a, "name").ptr());
        out += "}}";
      }
    });
  throw unsupported();
}

} // namespace

void bindFxGraphWriter(nb::module_ &module) {
  nb::class_<FxGraphWriter>(module, "FxGraphWriter",
                            "The graphs of an ExportedProgram as the decoder's JSON (python/commlens/_program_json.py)")
      .def(nb::init<nb::handle>(), nb::arg("context"))
      .def("document", &FxGraphWriter::document, nb::arg("graph_module"), nb::arg("module_call_graph"),
           nb::arg("head"), nb::arg("middle"), nb::arg("tail"),
           "head, the graph's JSON object, middle, the module call graph's list and tail, as UTF-8 bytes")
      .def("argument_spec", &FxGraphWriter::argumentSpec, nb::arg("spec"), "one argument spec's JSON text");
}

} // namespace commlens::python
