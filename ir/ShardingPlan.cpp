#include "ir/ShardingPlan.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/GlobPattern.h"

namespace commlens {

llvm::StringRef name(ParallelStyle::Kind k) {
  static constexpr const char *kNames[] = {
#define STYLE(KIND, CLASS) #CLASS,
#include "ir/ParallelStyles.def"
  };
  return kNames[static_cast<size_t>(k)];
}

std::optional<ParallelStyle::Kind> styleKindNamed(llvm::StringRef torchClass) {
#define STYLE(KIND, CLASS)                                                                                             \
  if (torchClass == #CLASS)                                                                                            \
    return ParallelStyle::Kind::KIND;
#include "ir/ParallelStyles.def"
  return std::nullopt;
}

bool matchesGlob(llvm::StringRef pattern, llvm::StringRef text) {
  if (pattern == "*") // the usual wildcard segment ("layers.*"), matched against every module path
    return true;
  if (pattern.find_first_of("*?[\\") == llvm::StringRef::npos) // a plain name: no pattern to compile
    return pattern == text;
  llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(pattern);
  if (!glob) {
    llvm::consumeError(glob.takeError());
    return pattern == text;
  }
  return glob->match(text);
}

// parallelize_module matches a plan key atom by atom (fnmatch per dot-separated part).
bool matchesModulePath(llvm::StringRef pattern, llvm::StringRef path) {
  if (pattern.empty() || path.empty())
    return pattern.empty() && path.empty();
  // Segment by segment, without splitting into lists: plans are matched against every module.
  size_t dots = pattern.count('.');
  if (dots != path.count('.'))
    return false;
  for (size_t i = 0; i <= dots; ++i) {
    auto [want, wantRest] = pattern.split('.');
    auto [have, haveRest] = path.split('.');
    if (!matchesGlob(want, have))
      return false;
    pattern = wantRest;
    path = haveRest;
  }
  return true;
}

std::string pathAfterCheckpointWrappers(const ShardingPlan &plan, llvm::StringRef path) {
  for (size_t end = 0; !path.empty() && end != llvm::StringRef::npos;) {
    end = path.find('.', end + 1);
    llvm::StringRef prefix = path.substr(0, end);
    for (const ActivationCheckpointUnit &unit : plan.activationCheckpoint)
      if (unit.wrapper && matchesModulePath(unit.pattern, prefix))
        return (prefix + "._checkpoint_wrapped_module" + path.substr(prefix.size())).str();
  }
  return path.str();
}

} // namespace commlens
