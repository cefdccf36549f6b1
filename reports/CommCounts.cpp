#include "reports/CommCounts.h"

#include "ir/Error.h"
#include "ir/InputFile.h"

#include "llvm/Support/MemoryBuffer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>

namespace commlens {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

llvm::StringRef phaseName(CommPhase phase) { return phase == CommPhase::Forward ? "forward" : "backward"; }

llvm::StringRef formatName(CountsFormat format) {
  return format == CountsFormat::CommDebugModeTree ? "commdebugmode-tree" : "commlens-counts";
}

int64_t ModuleCounts::count(CommPhase p, llvm::StringRef key) const {
  auto it = phase(p).find(key);
  return it == phase(p).end() ? 0 : it->second.count;
}

int64_t ModuleCounts::total(CommPhase p) const {
  int64_t n = 0;
  for (const auto &[key, cell] : phase(p))
    n += cell.count;
  return n;
}

const ModuleCounts *CommCounts::find(llvm::StringRef fqn) const {
  auto it = index_.find(fqn);
  return it == index_.end() ? nullptr : &modules_[it->second];
}

ModuleCounts *CommCounts::find(llvm::StringRef fqn) {
  auto it = index_.find(fqn);
  return it == index_.end() ? nullptr : &modules_[it->second];
}

llvm::Expected<ModuleCounts *> CommCounts::addModule(llvm::StringRef fqn, unsigned depth, llvm::StringRef moduleType) {
  if (index_.count(fqn))
    return makeError("duplicate module '{}'", fqn.str());
  if (depth > 0 && (modules_.empty() || modules_.back().depth + 1 < depth))
    return makeError("module '{}' at depth {} has no parent", fqn.str(), depth);
  index_[fqn] = modules_.size();
  ModuleCounts &m = modules_.emplace_back();
  m.fqn = fqn.str();
  m.moduleType = moduleType.str();
  m.depth = depth;
  return &m;
}

int64_t CommCounts::total(CommPhase p) const {
  if (const ModuleCounts *global = find("Global"))
    return global->total(p);
  int64_t n = 0;
  for (const ModuleCounts &m : modules_)
    if (m.depth == 0)
      n += m.total(p);
  return n;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Writers

/// [[op, count], ...] as CommDebugMode writes them; an approximate 0 lives only in approximate_*.
/// {op: bytes} of the cells that record bytes.
ordered_json bytesObject(const ModuleCounts &m, CommPhase p) {
  ordered_json out = ordered_json::object();
  for (const auto &[key, cell] : m.phase(p))
    if (cell.bytes)
      out[key] = *cell.bytes;
  return out;
}

ordered_json bytesBoundsObject(const ModuleCounts &m, CommPhase p) {
  ordered_json out = ordered_json::object();
  for (const auto &[key, cell] : m.phase(p))
    if (cell.bytes && cell.bytesBounds)
      out[key] = {cell.bytesBounds->first, cell.bytesBounds->second};
  return out;
}

ordered_json pairList(const ModuleCounts &m, CommPhase p) {
  ordered_json pairs = ordered_json::array();
  for (const auto &[key, cell] : m.phase(p))
    if (cell.count != 0 || !cell.approximate)
      pairs.push_back({key, cell.count});
  return pairs;
}

ordered_json approximateList(const ModuleCounts &m, CommPhase p) {
  ordered_json list = ordered_json::array();
  for (const auto &[key, cell] : m.phase(p))
    if (cell.approximate)
      list.push_back(key);
  return list;
}

// ---------------------------------------------------------------------------------------------
// Readers: a JSON value with its dotted path; failures throw ParseError with a one-line message.

struct ParseError {
  std::string message;
};

/// Counts and bytes are 64-bit (one cell of a 405B-shaped Llama under tensor parallelism passes
/// 2^33 bytes), each bounded, cell by cell and summed over the file, by the largest integer a
/// double holds exactly: the HTML reports' script and other JSON readers keep numbers as doubles,
/// and no sum over a file's cells (totals, inclusive counts) overflows.
constexpr uint64_t kMaxCount = (uint64_t(1) << 53) - 1;
constexpr uint64_t kMaxBytes = kMaxCount;
/// What the cells of a file read so far add up to.
struct FileTotals {
  uint64_t count = 0, bytes = 0;
};
/// The deepest nesting of arrays and objects read (a tree file nests one level per module).
constexpr int kMaxJsonDepth = 256;
struct TooDeep {};

struct JsonRef {
  const json &v;
  std::string path;

  [[noreturn]] void fail(const std::string &what) const {
    throw ParseError{path.empty() ? what : fmt::format("{}: {}", path, what)};
  }
  std::string childPath(const std::string &key) const { return path.empty() ? key : path + "." + key; }
  bool has(const char *key) const { return v.is_object() && v.contains(key); }
  JsonRef operator[](const char *key) const {
    if (!v.is_object())
      fail("expected an object");
    auto it = v.find(key);
    if (it == v.end())
      fail(fmt::format("missing required field '{}'", key));
    return {*it, childPath(key)};
  }
  JsonRef at(size_t i) const { return {v[i], fmt::format("{}[{}]", path, i)}; }
  const json &array() const {
    if (!v.is_array())
      fail(fmt::format("expected an array, got {}", describe()));
    return v;
  }
  const json &object() const {
    if (!v.is_object())
      fail(fmt::format("expected an object, got {}", describe()));
    return v;
  }
  std::string string() const {
    if (!v.is_string())
      fail(fmt::format("expected a string, got {}", describe()));
    return v.get<std::string>();
  }
  int64_t count() const { return nonNegative("count", kMaxCount); }
  int64_t bytes() const { return nonNegative("bytes", kMaxBytes); }
  /// A non-negative integer `what` of at most `max`.
  int64_t nonNegative(const char *what, uint64_t max) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail(fmt::format("expected a non-negative integer {}, got {}", what, describe()));
    // Unsigned first: a value past INT64_MAX would read as negative.
    if (v.get<uint64_t>() > max)
      fail(fmt::format("{} {} is out of range (at most {})", what, describe(), max));
    return v.get<int64_t>();
  }
  std::string describe() const {
    std::string s = v.dump();
    if (s.size() > 40)
      s = s.substr(0, 37) + "...";
    return s;
  }
};

std::string keyPath(const JsonRef &obj, const std::string &key) {
  // Keys with dots or brackets would make the dotted path ambiguous: quote them.
  bool plain = key.find_first_of(".[]\"' ") == std::string::npos && !key.empty();
  return plain ? obj.childPath(key) : fmt::format("{}[{}]", obj.path, json(key).dump());
}

void setCount(ModuleCounts &m, CommPhase p, const std::string &key, const JsonRef &value, const JsonRef &where,
              FileTotals &totals) {
  int64_t n = value.count();
  if (totals.count + n > kMaxCount) // both at most 2^53: no overflow
    value.fail(fmt::format("count {} takes the file's total past {}", n, kMaxCount));
  totals.count += n;
  auto [it, inserted] = m.phase(p).try_emplace(key, CommCell{n, false, std::nullopt, std::nullopt});
  if (!inserted)
    where.fail(fmt::format("duplicate collective '{}'", key));
}

void readApproximate(ModuleCounts &m, const JsonRef &module) {
  for (CommPhase p : kCommPhases) {
    std::string field = fmt::format("approximate_{}", phaseName(p).str());
    if (!module.has(field.c_str()))
      continue;
    JsonRef list = module[field.c_str()];
    list.array();
    for (size_t i = 0; i < list.v.size(); ++i)
      m.phase(p)[list.at(i).string()].approximate = true;
  }
}

/// Bytes per collective of a module's phase: `field` is an {op: bytes} object (counts format) or
/// a list of [op, bytes] pairs (tree); each op must have a count.
void readBytes(ModuleCounts &m, const JsonRef &module, CommPhase p, const char *field, FileTotals &totals) {
  if (!module.has(field))
    return;
  JsonRef bytes = module[field];
  auto set = [&](const std::string &key, const JsonRef &value) {
    auto cell = m.phase(p).find(key);
    if (cell == m.phase(p).end())
      value.fail(fmt::format("bytes for collective '{}', which has no count", key));
    int64_t n = value.bytes();
    if (totals.bytes + n > kMaxBytes) // both at most 2^53: no overflow
      value.fail(fmt::format("bytes {} take the file's total past {}", n, kMaxBytes));
    totals.bytes += n;
    cell->second.bytes = n;
  };
  if (bytes.v.is_array()) {
    for (size_t i = 0; i < bytes.v.size(); ++i) {
      JsonRef pair = bytes.at(i);
      if (!pair.v.is_array() || pair.v.size() != 2)
        pair.fail(fmt::format("expected an [op, bytes] pair, got {}", pair.describe()));
      set(pair.at(0).string(), pair.at(1));
    }
    return;
  }
  bytes.object();
  for (auto it = bytes.v.begin(); it != bytes.v.end(); ++it)
    set(it.key(), JsonRef{it.value(), keyPath(bytes, it.key())});
}

/// {op: [fewest, most]} bytes of cells whose bytes depend on the routing; each op must have
/// bytes, within the bounds.
void readBytesBounds(ModuleCounts &m, const JsonRef &module, CommPhase p, const char *field) {
  if (!module.has(field))
    return;
  JsonRef bounds = module[field];
  bounds.object();
  for (auto it = bounds.v.begin(); it != bounds.v.end(); ++it) {
    JsonRef pair{it.value(), keyPath(bounds, it.key())};
    auto cell = m.phase(p).find(it.key());
    if (cell == m.phase(p).end() || !cell->second.bytes)
      pair.fail(fmt::format("bytes bounds for collective '{}', which has no bytes", it.key()));
    if (!pair.v.is_array() || pair.v.size() != 2)
      pair.fail(fmt::format("expected [fewest, most] bytes, got {}", pair.describe()));
    int64_t lo = pair.at(0).bytes(), hi = pair.at(1).bytes();
    if (lo > *cell->second.bytes || *cell->second.bytes > hi)
      pair.fail(fmt::format("bytes {} are not within their bounds [{}, {}]", *cell->second.bytes, lo, hi));
    cell->second.bytesBounds = std::make_pair(lo, hi);
  }
}

std::string moduleTypeOf(const JsonRef &module) {
  if (!module.has("module_type"))
    return {};
  return module["module_type"].string();
}

void readTreeModule(CommCounts &counts, const JsonRef &node, unsigned depth, FileTotals &totals) {
  node.object();
  std::string fqn = node["fqn"].string();
  ModuleCounts scratch;
  scratch.fqn = fqn;
  scratch.moduleType = moduleTypeOf(node);
  for (CommPhase p : kCommPhases) {
    std::string field = fmt::format("collectives_{}", phaseName(p).str());
    JsonRef list = node[field.c_str()];
    list.array();
    for (size_t i = 0; i < list.v.size(); ++i) {
      JsonRef pair = list.at(i);
      if (!pair.v.is_array() || pair.v.size() != 2)
        pair.fail(fmt::format("expected an [op, count] pair, got {}", pair.describe()));
      setCount(scratch, p, pair.at(0).string(), pair.at(1), pair, totals);
    }
    readBytes(scratch, node, p, fmt::format("collective_bytes_{}", phaseName(p).str()).c_str(), totals);
    readBytesBounds(scratch, node, p, fmt::format("collective_bytes_bounds_{}", phaseName(p).str()).c_str());
  }
  readApproximate(scratch, node);
  JsonRef children = node["children"];
  children.array();

  if (const ModuleCounts *first = counts.find(fqn)) {
    // A module called more than once appears once per call, each time with the same counts.
    if (first->phases != scratch.phases)
      node.fail(fmt::format("module '{}' appears twice with different collective counts", fqn));
  } else {
    auto added = counts.addModule(fqn, depth, scratch.moduleType);
    if (!added)
      node.fail(takeMessage(added.takeError()));
    (*added)->phases = std::move(scratch.phases);
  }
  for (size_t i = 0; i < children.v.size(); ++i)
    readTreeModule(counts, children.at(i), depth + 1, totals);
}

/// Depth of a flat-file module: one below the nearest earlier module whose fqn is a dotted
/// prefix of it, else one below "Global" when that came first, else 0.
unsigned flatDepth(const CommCounts &counts, const std::string &fqn) {
  if (fqn == "Global")
    return 0;
  for (size_t end = fqn.size(); end > 0;) {
    size_t dot = fqn.rfind('.', end - 1);
    if (dot == std::string::npos || dot == 0)
      break;
    if (const ModuleCounts *parent = counts.find(llvm::StringRef(fqn).take_front(dot)))
      return parent->depth + 1;
    end = dot;
  }
  return counts.find("Global") ? 1 : 0;
}

void readFlat(CommCounts &counts, const JsonRef &doc) {
  FileTotals totals;
  JsonRef version = doc["version"];
  if (!version.v.is_number_integer())
    version.fail(fmt::format("expected an integer, got {}", version.describe()));
  if (version.v.get<int64_t>() != 1)
    version.fail(fmt::format("unsupported commlens-counts version {} (commlens reads version 1)", version.v.dump()));
  JsonRef modules = doc["modules"];
  modules.array();
  for (size_t i = 0; i < modules.v.size(); ++i) {
    JsonRef module = modules.at(i);
    module.object();
    std::string fqn = module["fqn"].string();
    if (counts.find(fqn))
      module["fqn"].fail(fmt::format("duplicate module '{}'", fqn));
    // Pre-order with dotted-prefix parents; a module whose parent is not the previous one or an
    // ancestor of it would break tree order, so its depth is capped at previous depth + 1.
    unsigned depth = flatDepth(counts, fqn);
    if (!counts.modules().empty())
      depth = std::min(depth, counts.modules().back().depth + 1);
    else
      depth = 0;
    auto added = counts.addModule(fqn, depth, moduleTypeOf(module));
    if (!added)
      module.fail(takeMessage(added.takeError()));
    ModuleCounts &m = **added;
    for (CommPhase p : kCommPhases) {
      JsonRef cells = module[phaseName(p).data()];
      cells.object();
      for (auto it = cells.v.begin(); it != cells.v.end(); ++it) {
        JsonRef value{it.value(), keyPath(cells, it.key())};
        setCount(m, p, it.key(), value, value, totals);
      }
      readBytes(m, module, p, fmt::format("{}_bytes", phaseName(p).str()).c_str(), totals);
      readBytesBounds(m, module, p, fmt::format("{}_bytes_bounds", phaseName(p).str()).c_str());
    }
    readApproximate(m, module);
  }
}

} // namespace

llvm::StringRef CommCounts::phaseLabel() const {
  if (inference)
    return "inference";
  return onlyPhase ? phaseName(*onlyPhase) : "both";
}

std::string CommCounts::toCountsJson() const {
  ordered_json doc;
  doc["format"] = "commlens-counts";
  doc["version"] = 1;
  doc["phase"] = phaseLabel().str();
  ordered_json mods = ordered_json::array();
  for (const ModuleCounts &m : modules_) {
    ordered_json entry;
    entry["fqn"] = m.fqn;
    if (!m.moduleType.empty())
      entry["module_type"] = m.moduleType;
    for (CommPhase p : kCommPhases) {
      ordered_json cells = ordered_json::object();
      for (const auto &[key, cell] : m.phase(p))
        if (cell.count != 0 || !cell.approximate)
          cells[key] = cell.count;
      entry[phaseName(p).str()] = cells;
    }
    for (CommPhase p : kCommPhases)
      if (ordered_json bytes = bytesObject(m, p); !bytes.empty())
        entry[fmt::format("{}_bytes", phaseName(p).str())] = bytes;
    for (CommPhase p : kCommPhases)
      if (ordered_json bounds = bytesBoundsObject(m, p); !bounds.empty())
        entry[fmt::format("{}_bytes_bounds", phaseName(p).str())] = bounds;
    for (CommPhase p : kCommPhases)
      if (ordered_json list = approximateList(m, p); !list.empty())
        entry[fmt::format("approximate_{}", phaseName(p).str())] = list;
    mods.push_back(std::move(entry));
  }
  doc["modules"] = std::move(mods);
  return doc.dump(1) + "\n";
}

std::string CommCounts::toTreeJson() const {
  // Pre-order with depths -> nested children, via a stack of open nodes.
  std::vector<ordered_json> stack;
  std::vector<ordered_json> roots;
  auto close = [&] {
    ordered_json node = std::move(stack.back());
    stack.pop_back();
    if (stack.empty())
      roots.push_back(std::move(node));
    else
      stack.back()["children"].push_back(std::move(node));
  };
  for (const ModuleCounts &m : modules_) {
    while (stack.size() > m.depth)
      close();
    ordered_json node;
    node["fqn"] = m.fqn;
    node["module_type"] = m.moduleType;
    node["parameters"] = ordered_json::array();
    node["children"] = ordered_json::array();
    for (CommPhase p : kCommPhases)
      node[fmt::format("collectives_{}", phaseName(p).str())] = pairList(m, p);
    for (CommPhase p : kCommPhases)
      if (ordered_json bytes = bytesObject(m, p); !bytes.empty())
        node[fmt::format("collective_bytes_{}", phaseName(p).str())] = bytes;
    for (CommPhase p : kCommPhases)
      if (ordered_json bounds = bytesBoundsObject(m, p); !bounds.empty())
        node[fmt::format("collective_bytes_bounds_{}", phaseName(p).str())] = bounds;
    for (CommPhase p : kCommPhases)
      if (ordered_json list = approximateList(m, p); !list.empty())
        node[fmt::format("approximate_{}", phaseName(p).str())] = list;
    stack.push_back(std::move(node));
  }
  while (!stack.empty())
    close();
  ordered_json root;
  if (roots.size() == 1) {
    root = std::move(roots[0]);
  } else {
    // Several roots (or none): wrap them in a "Global" root like CommDebugMode's.
    root["fqn"] = "Global";
    root["module_type"] = "";
    root["parameters"] = ordered_json::array();
    root["children"] = std::move(roots);
    root["collectives_forward"] = ordered_json::array();
    root["collectives_backward"] = ordered_json::array();
  }
  if (onlyPhase)
    root["phase"] = phaseLabel().str();
  return root.dump(4) + "\n";
}

llvm::Expected<CommCounts> parseCommCounts(llvm::StringRef text) {
  json doc;
  // The parser reports each array and object start with its depth; stop at the first too deep
  // (the tree reader and the messages' dumps recurse).
  json::parser_callback_t limitDepth = [](int depth, json::parse_event_t event, json &) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{};
    return true;
  };
  try {
    doc = json::parse(text.begin(), text.end(), limitDepth);
  } catch (const TooDeep &) {
    return makeError("invalid JSON: nested deeper than {} levels", kMaxJsonDepth);
  } catch (const json::parse_error &e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> keep the tail
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return makeError("invalid JSON: {}", what);
  } catch (const json::exception &e) {
    // A number the parser cannot hold (out_of_range.406: "number overflow parsing '1e999'").
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return makeError("invalid JSON: {}", what);
  }
  CommCounts counts;
  try {
    JsonRef root{doc, ""};
    if (!doc.is_object())
      return makeError("unknown format: expected a JSON object (a CommDebugMode generate_json_dump tree or a "
                       "commlens-counts file), got {}",
                       root.describe());
    if (doc.contains("phase")) {
      counts.phaseStated = true;
      JsonRef phase = root["phase"];
      std::string value = phase.v.is_string() ? phase.v.get<std::string>() : "";
      if (value == "forward")
        counts.onlyPhase = CommPhase::Forward;
      else if (value == "backward")
        counts.onlyPhase = CommPhase::Backward;
      else if (value == "inference") {
        counts.onlyPhase = CommPhase::Forward;
        counts.inference = true;
      } else if (value != "both")
        phase.fail(fmt::format("expected \"forward\", \"backward\", \"both\" or \"inference\", got {}",
                               phase.describe()));
    }
    if (doc.contains("format")) {
      JsonRef format = root["format"];
      if (!format.v.is_string() || format.v.get<std::string>() != "commlens-counts")
        return makeError("format: unknown format {} (expected \"commlens-counts\")", format.describe());
      counts.format = CountsFormat::CommlensCounts;
      readFlat(counts, root);
    } else if (doc.contains("fqn")) {
      counts.format = CountsFormat::CommDebugModeTree;
      FileTotals totals;
      readTreeModule(counts, root, 0, totals);
    } else {
      return makeError("unknown format: neither a CommDebugMode generate_json_dump tree (no 'fqn') nor a "
                       "commlens-counts file (no 'format')");
    }
  } catch (const ParseError &e) {
    return makeError("{}", e.message);
  }
  return counts;
}

llvm::Expected<CommCounts> loadCommCounts(llvm::StringRef path) {
  if (llvm::Error err = checkInputFile(path, kMaxTextFileBytes))
    return makeError("{}: {}", path.str(), takeMessage(std::move(err)));
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer)
    return makeError("{}: cannot open file", path.str());
  auto counts = parseCommCounts((*buffer)->getBuffer());
  if (!counts)
    return makeError("{}: {}", path.str(), takeMessage(counts.takeError()));
  return counts;
}

} // namespace commlens
