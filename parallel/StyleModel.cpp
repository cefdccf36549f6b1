#include "parallel/StyleModel.h"

#include "llvm/Support/ErrorHandling.h"

#include <fmt/format.h>

namespace commlens {

// Each style's model, defined in parallel/CLASS.cpp.
#define STYLE(KIND, CLASS) const StyleModel &CLASS##Model();
#include "ir/ParallelStyles.def"

const StyleModel &styleModel(ParallelStyle::Kind kind) {
  switch (kind) {
#define STYLE(KIND, CLASS)                                                                                             \
  case ParallelStyle::Kind::KIND:                                                                                      \
    return CLASS##Model();
#include "ir/ParallelStyles.def"
  }
  llvm_unreachable("every kind is in ir/ParallelStyles.def");
}

ParallelStyle decodeParallelStyle(const JsonRef &entry, const std::string &pattern) {
  std::string cls = entry.field("style").asString();
  std::optional<ParallelStyle::Kind> kind = styleKindNamed(cls);
  if (!kind)
    entry.fail(fmt::format("unknown parallel style '{}'", cls));
  ParallelStyle s;
  s.pattern = pattern;
  s.kind = *kind;
  styleModel(*kind).decode(entry, s); // missing fields take the constructor defaults
  return s;
}

} // namespace commlens
