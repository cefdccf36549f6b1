#include "ir/OpSchemaTable.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace commlens::opschema {
namespace {

/// Orders schemas by name, for equal_range over the sorted table.
struct ByName {
  bool operator()(const Schema &s, std::string_view name) const { return std::string_view(s.name) < name; }
  bool operator()(std::string_view name, const Schema &s) const { return name < std::string_view(s.name); }
};

} // namespace

llvm::ArrayRef<Schema> overloadsOf(std::string_view name) {
  llvm::ArrayRef<Schema> all = schemas();
  auto [first, last] = std::equal_range(all.begin(), all.end(), name, ByName());
  return all.slice(first - all.begin(), last - first);
}

const Schema *find(std::string_view name, std::string_view overload) {
  if (overload == "default")
    overload = {};
  llvm::ArrayRef<Schema> overloads = overloadsOf(name);
  auto it = llvm::find_if(overloads, [&](const Schema &s) { return s.overload == overload; });
  return it == overloads.end() ? nullptr : &*it;
}

} // namespace commlens::opschema
