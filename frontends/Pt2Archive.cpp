#include "frontends/Pt2Archive.h"

#include "ir/Error.h"

#include "llvm/Support/MemoryBuffer.h"

#include <zip.h>

#include <algorithm>

namespace commlens {
namespace {

/// Read-only, so nothing to write back: zip_discard, not zip_close.
struct ZipDiscard {
  void operator()(zip_t *zip) const { zip_discard(zip); }
};
struct ZipFileClose {
  void operator()(zip_file_t *file) const { zip_fclose(file); }
};

bool hasZipMagic(llvm::StringRef bytes) { return bytes.size() >= 4 && bytes.startswith("PK"); }

} // namespace

struct Pt2Archive::Impl {
  /// The archive's bytes (the file mapped, or a copy of the caller's); libzip reads them in place.
  std::unique_ptr<llvm::MemoryBuffer> bytes;
  std::unique_ptr<zip_t, ZipDiscard> zip;
  /// "<root folder>/": torch.export.save puts every record under one folder, named after the file.
  std::string root;

  zip_int64_t locate(llvm::StringRef name) const { return zip_name_locate(zip.get(), (root + name).str().c_str(), 0); }

  /// Opens the zip held in `bytes` and checks that it is laid out as torch.export.save writes it.
  static llvm::Expected<std::unique_ptr<Pt2Archive>> open(std::unique_ptr<llvm::MemoryBuffer> bytes);
};

Pt2Archive::Pt2Archive(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pt2Archive::~Pt2Archive() = default;

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::Impl::open(std::unique_ptr<llvm::MemoryBuffer> bytes) {
  if (!hasZipMagic(bytes->getBuffer()))
    return makeError("not a zip archive (expected a torch.export.save .pt2 file)");
  auto impl = std::make_unique<Impl>();
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t *source = zip_source_buffer_create(bytes->getBufferStart(), bytes->getBufferSize(), 0, &error);
  zip_t *zip = source ? zip_open_from_source(source, ZIP_RDONLY, &error) : nullptr;
  if (!zip) {
    // zip_error_strerror's text lives in `error`; copy it before zip_error_fini frees it.
    std::string why = zip_error_code_zip(&error) == ZIP_ER_NOZIP ? "no end of central directory record (truncated?)"
                                                                  : zip_error_strerror(&error);
    zip_error_fini(&error);
    zip_source_free(source); // zip_open_from_source took it only when it succeeded
    return makeError("broken zip archive: {}", why);
  }
  zip_error_fini(&error);
  impl->bytes = std::move(bytes);
  impl->zip.reset(zip);
  // The first entry names the root folder, as for LibTorch's reader; records() checks the others.
  if (zip_get_num_entries(zip, 0) == 0)
    return makeError("empty zip archive: not a torch.export.save archive");
  llvm::StringRef first = zip_get_name(zip, 0, 0);
  size_t slash = first.find('/');
  if (slash == llvm::StringRef::npos)
    return makeError("zip archive without a root folder (torch.export archives from torch <= 2.7 are not supported)");
  impl->root = first.take_front(slash + 1).str();
  if (impl->locate("version") < 0 && impl->locate(".data/version") < 0)
    return makeError("zip archive without a version record: not a torch.export.save archive");
  return std::unique_ptr<Pt2Archive>(new Pt2Archive(std::move(impl)));
}

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::open(llvm::StringRef path) {
  // Mapped, not read: a .pt2 with weights may be large, and only a few records are read.
  auto bytes = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!bytes)
    return makeError("cannot open file");
  return Impl::open(std::move(*bytes));
}

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::openBuffer(llvm::StringRef bytes) {
  return Impl::open(llvm::MemoryBuffer::getMemBufferCopy(bytes));
}

llvm::Expected<std::vector<std::string>> Pt2Archive::records() const {
  zip_int64_t count = zip_get_num_entries(impl_->zip.get(), 0);
  std::vector<std::string> names;
  names.reserve(count);
  for (zip_int64_t i = 0; i < count; ++i) {
    llvm::StringRef name = zip_get_name(impl_->zip.get(), i, 0);
    if (!name.consume_front(impl_->root))
      return makeError("cannot list records: entry {} is not in the root folder {}", name.str(), impl_->root);
    names.push_back(name.str());
  }
  return names;
}

bool Pt2Archive::hasRecord(llvm::StringRef name) const { return impl_->locate(name) >= 0; }

llvm::StringRef Pt2Archive::bytes() const { return impl_->bytes->getBuffer(); }

llvm::Expected<std::string> Pt2Archive::read(llvm::StringRef name) const {
  zip_t *zip = impl_->zip.get();
  zip_int64_t index = impl_->locate(name);
  zip_stat_t stat;
  std::unique_ptr<zip_file_t, ZipFileClose> file;
  if (index >= 0 && zip_stat_index(zip, index, 0, &stat) == 0)
    file.reset(zip_fopen_index(zip, index, 0));
  if (!file)
    return makeError("cannot read record '{}': {}", name.str(),
                     index < 0 ? "no such record" : zip_error_strerror(zip_get_error(zip)));
  // The size the entry claims is a hint only (a broken archive may claim any): read to the end,
  // which is where libzip checks the CRC. The extra byte lets that last read see the end.
  zip_uint64_t claimed = stat.valid & ZIP_STAT_SIZE ? stat.size : 0;
  std::string data(std::min<zip_uint64_t>(claimed, impl_->bytes->getBufferSize()) + 1, '\0');
  size_t used = 0;
  for (;;) {
    if (used == data.size())
      data.resize(2 * data.size());
    zip_int64_t n = zip_fread(file.get(), data.data() + used, data.size() - used);
    if (n < 0)
      return makeError("cannot read record '{}': {}", name.str(), zip_error_strerror(zip_file_get_error(file.get())));
    if (n == 0)
      break;
    used += n;
  }
  data.resize(used);
  return data;
}

} // namespace commlens
