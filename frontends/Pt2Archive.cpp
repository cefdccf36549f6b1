#include "frontends/Pt2Archive.h"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <fstream>

namespace commlens {
namespace {

/// c10 messages carry a backtrace, several lines and advice; keep the first sentence.
std::string firstLine(const c10::Error &e) {
  std::string msg = e.what_without_backtrace();
  if (auto end = msg.find_first_of("\n"); end != std::string::npos)
    msg.resize(end);
  // CAFFE_ENFORCE's "[enforce fail at inline_container.cc:340] . <what>": keep <what>.
  if (msg.rfind("[enforce fail at ", 0) == 0)
    if (auto what = msg.find("] . "); what != std::string::npos)
      msg.erase(0, what + 4);
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
  /// The archive's bytes when opened from memory (openBuffer); the reader reads them in place.
  std::string data;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
};

namespace {

/// Opens the reader `makeReader` builds, turning LibTorch's exceptions into one-line messages.
template <typename MakeReader>
llvm::Error openReader(std::unique_ptr<caffe2::serialize::PyTorchStreamReader> &reader, MakeReader makeReader) {
  try {
    reader = makeReader();
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
  return llvm::Error::success();
}

bool hasZipMagic(const char *bytes, size_t size) { return size >= 4 && bytes[0] == 'P' && bytes[1] == 'K'; }

} // namespace

Pt2Archive::Pt2Archive(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pt2Archive::~Pt2Archive() = default;

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::open(llvm::StringRef path) {
  {
    std::ifstream probe(path.str(), std::ios::binary);
    if (!probe)
      return archiveError("cannot open file");
    char magic[4] = {};
    probe.read(magic, 4);
    if (!hasZipMagic(magic, static_cast<size_t>(probe.gcount())))
      return archiveError("not a zip archive (expected a torch.export.save .pt2 file)");
  }
  auto impl = std::make_unique<Impl>();
  if (llvm::Error err = openReader(impl->reader, [&] { return std::make_unique<caffe2::serialize::PyTorchStreamReader>(path.str()); }))
    return err;
  return std::unique_ptr<Pt2Archive>(new Pt2Archive(std::move(impl)));
}

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::openBuffer(llvm::StringRef bytes) {
  if (!hasZipMagic(bytes.data(), bytes.size()))
    return archiveError("not a zip archive (expected a torch.export.save .pt2 file)");
  auto impl = std::make_unique<Impl>();
  impl->data = bytes.str();
  const std::string &data = impl->data;
  if (llvm::Error err = openReader(impl->reader, [&] {
        auto adapter = std::make_shared<caffe2::serialize::MemoryReadAdapter>(data.data(), static_cast<off_t>(data.size()));
        return std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::move(adapter));
      }))
    return err;
  return std::unique_ptr<Pt2Archive>(new Pt2Archive(std::move(impl)));
}

llvm::Expected<std::vector<std::string>> Pt2Archive::records() const {
  // LibTorch checks each central directory entry here, not when it opens the archive: an entry
  // outside the root folder throws.
  try {
    return impl_->reader->getAllRecords();
  } catch (const c10::Error &e) {
    return archiveError("cannot list records: " + firstLine(e));
  }
}

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
  } catch (const std::exception &e) { // e.g. bad_alloc for a record whose header claims a huge size
    return archiveError("cannot read record '" + name.str() + "': " + e.what());
  }
}

} // namespace commlens
