#include "frontends/TorchScriptLoader.h"

#include "frontends/torchscript/TorchScriptPlugin.h"
#include "ir/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <vector>

namespace commlens {
namespace {

constexpr llvm::StringLiteral kLibrary = "libcommlens_torchscript.so";

/// The library's candidate paths: $COMMLENS_TORCHSCRIPT_LIBRARY alone when set, else beside the
/// binary holding this code (the CLI, or the Python extension), in its install-relative folder,
/// and in this build tree.
std::vector<std::string> candidatePaths() {
  if (auto env = llvm::sys::Process::GetEnv("COMMLENS_TORCHSCRIPT_LIBRARY"))
    return {*env};
  std::vector<std::string> out;
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&isTorchScriptArchive), &info) && info.dli_fname) {
    llvm::SmallString<256> self(info.dli_fname);
    llvm::sys::fs::make_absolute(self);
    llvm::SmallString<256> beside(llvm::sys::path::parent_path(self)), installed(beside);
    llvm::sys::path::append(beside, kLibrary);
    llvm::sys::path::append(installed, COMMLENS_TORCHSCRIPT_RELDIR, kLibrary);
    out.push_back(std::string(beside));
    out.push_back(std::string(installed));
  }
  out.push_back(COMMLENS_TORCHSCRIPT_BUILD_PATH);
  return out;
}

using Convert = int (*)(const char *, size_t, char **, char **, char **);
using Free = void (*)(char *);

/// The library's two entry points, or why they cannot be had.
struct Plugin {
  Convert convert = nullptr;
  Free release = nullptr;
  std::string error;
};

Plugin loadPlugin() {
  std::vector<std::string> paths = candidatePaths();
  for (const std::string &path : paths) {
    if (!llvm::sys::fs::exists(path))
      continue;
    std::string why;
    auto lib = llvm::sys::DynamicLibrary::getPermanentLibrary(path.c_str(), &why);
    if (!lib.isValid())
      return {nullptr, nullptr, fmt::format("cannot load the TorchScript frontend {}: {}", path, why)};
    Plugin p{reinterpret_cast<Convert>(lib.getAddressOfSymbol("commlens_torchscript_to_program_json")),
             reinterpret_cast<Free>(lib.getAddressOfSymbol("commlens_torchscript_free")), ""};
    if (!p.convert || !p.release)
      p.error = fmt::format("{} lacks the commlens_torchscript entry points", path);
    return p;
  }
  return {nullptr, nullptr,
          fmt::format("the TorchScript frontend {} is not installed (looked in {})", kLibrary.str(),
                      llvm::join(paths, ", "))};
}

} // namespace

bool isTorchScriptArchive(const Pt2Archive &archive) {
  if (!archive.hasRecord("data.pkl"))
    return false;
  auto records = archive.records();
  if (!records) {
    llvm::consumeError(records.takeError());
    return false;
  }
  return llvm::any_of(*records, [](const std::string &r) { return llvm::StringRef(r).startswith("code/"); });
}

llvm::Expected<TorchScriptProgram> convertTorchScript(llvm::StringRef bytes) {
  static const Plugin plugin = loadPlugin(); // once per process
  if (!plugin.error.empty())
    return makeError("{}", plugin.error);
  char *program = nullptr, *weights = nullptr, *error = nullptr;
  if (plugin.convert(bytes.data(), bytes.size(), &program, &weights, &error) != 0) {
    std::string message = error ? error : "unknown error";
    plugin.release(error);
    return makeError("TorchScript: {}", message);
  }
  TorchScriptProgram out{program, weights};
  plugin.release(program);
  plugin.release(weights);
  return out;
}

} // namespace commlens
