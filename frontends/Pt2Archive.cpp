#include "frontends/Pt2Archive.h"

#include <caffe2/serialize/inline_container.h>

#include <fstream>

namespace commlens {
namespace {

/// c10 messages carry a backtrace, several lines and advice; keep the first sentence.
std::string firstLine(const c10::Error &e) {
  std::string msg = e.what_without_backtrace();
  if (auto end = msg.find_first_of("\n"); end != std::string::npos)
    msg.resize(end);
  if (auto end = msg.find(". "); end != std::string::npos)
    msg.resize(end);
  return msg;
}

/// Built without fmt: LibTorch's include folder carries its own fmt, which must not meet ours.
llvm::Error archiveError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

} // namespace

struct Pt2Archive::Impl {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
};

Pt2Archive::Pt2Archive(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pt2Archive::~Pt2Archive() = default;

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::open(llvm::StringRef path) {
  {
    std::ifstream probe(path.str(), std::ios::binary);
    if (!probe)
      return archiveError("cannot open file");
    char magic[4] = {};
    probe.read(magic, 4);
    if (probe.gcount() < 4 || magic[0] != 'P' || magic[1] != 'K')
      return archiveError("not a zip archive (expected a torch.export.save .pt2 file)");
  }
  auto impl = std::make_unique<Impl>();
  try {
    impl->reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path.str());
  } catch (const c10::Error &e) {
    std::string why = firstLine(e);
    if (why.find("hasRecord(\"version\")") != std::string::npos)
      return archiveError("zip archive without a version record: not a torch.export.save archive");
    if (why.find("not in a subdirectory") != std::string::npos)
      return archiveError("zip archive without a root folder (torch.export archives from torch <= 2.7 are not supported)");
    return archiveError("broken zip archive: " + why);
  } catch (const std::exception &e) {
    return archiveError(std::string("broken zip archive: ") + e.what());
  }
  return std::unique_ptr<Pt2Archive>(new Pt2Archive(std::move(impl)));
}

std::vector<std::string> Pt2Archive::records() const { return impl_->reader->getAllRecords(); }

bool Pt2Archive::hasRecord(llvm::StringRef name) const {
  try {
    return impl_->reader->hasRecord(name.str());
  } catch (const c10::Error &) {
    return false;
  }
}

llvm::Expected<std::string> Pt2Archive::read(llvm::StringRef name) const {
  try {
    auto [data, size] = impl_->reader->getRecord(name.str());
    return std::string(static_cast<const char *>(data.get()), size);
  } catch (const c10::Error &e) {
    return archiveError("cannot read record '" + name.str() + "': " + firstLine(e));
  }
}

} // namespace commlens
