#include "frontends/Pt2Archive.h"

#include "ir/Error.h"
#include "ir/InputFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <libdeflate.h>
#include <zip.h>

#include <algorithm>

namespace commlens {

std::string quoteRecordText(llvm::StringRef text) {
  constexpr size_t kShown = 40;
  std::string out;
  llvm::raw_string_ostream os(out);
  os << '\'';
  llvm::printEscapedString(text.take_front(kShown), os);
  os << (text.size() > kShown ? "'..." : "'");
  return os.str();
}

namespace {

/// Read-only, so nothing to write back: zip_discard, not zip_close.
struct ZipDiscard {
  void operator()(zip_t *zip) const { zip_discard(zip); }
};
struct ZipFileClose {
  void operator()(zip_file_t *file) const { zip_fclose(file); }
};

bool hasZipMagic(llvm::StringRef bytes) { return bytes.size() >= 4 && bytes.startswith("PK"); }

/// The zip format versions torch 2.13's PyTorchStreamReader reads (caffe2/serialize/versions.h:
/// kMinSupportedFileFormatVersion, kMaxSupportedFileFormatVersion); torch.export.save writes 6.
constexpr uint64_t kMinFileFormatVersion = 1, kMaxFileFormatVersion = 10;

/// Checks the zip format version record as PyTorchStreamReader::init does
/// (caffe2/serialize/inline_container.cc): a decimal number, within the versions torch reads.
llvm::Error checkFileFormatVersion(llvm::StringRef record, llvm::StringRef text) {
  llvm::StringRef digits = text.trim();
  if (digits.empty() || !llvm::all_of(digits, llvm::isDigit))
    return makeError("{} is {}, not a version number", record.str(), quoteRecordText(text));
  uint64_t version;
  if (digits.getAsInteger(10, version) || version < kMinFileFormatVersion || version > kMaxFileFormatVersion)
    return makeError("{} is {}: torch 2.13 reads versions {} to {}", record.str(), quoteRecordText(digits),
                     kMinFileFormatVersion, kMaxFileFormatVersion);
  return llvm::Error::success();
}

/// Where the data of entry `index`, named `name`, starts in `zip`: libzip keeps the offset of its
/// local header to itself, so this reads the central directory as torch.export.save writes it (no
/// archive comment; zip64 where an offset needs it). Nothing when the archive says otherwise.
std::optional<uint64_t> dataOffset(llvm::StringRef zip, uint64_t index, llvm::StringRef name) {
  using llvm::support::endian::read16le, llvm::support::endian::read32le, llvm::support::endian::read64le;
  constexpr uint32_t kInZip64 = 0xffffffff;
  constexpr size_t kEnd = 22, kEnd64Locator = 20, kEnd64 = 56, kCentral = 46, kLocal = 30;
  auto has = [&](uint64_t at, uint64_t size, uint32_t signature) {
    return at <= zip.size() && zip.size() - at >= size && read32le(zip.data() + at) == signature;
  };
  if (!has(zip.size() - std::min(zip.size(), kEnd), kEnd, 0x06054b50))
    return std::nullopt;
  uint64_t entry = read32le(zip.end() - kEnd + 16);
  if (entry == kInZip64) {
    uint64_t locator = zip.size() - kEnd - std::min(zip.size() - kEnd, kEnd64Locator);
    if (!has(locator, kEnd64Locator, 0x07064b50))
      return std::nullopt;
    uint64_t end64 = read64le(zip.data() + locator + 8);
    if (!has(end64, kEnd64, 0x06064b50))
      return std::nullopt;
    entry = read64le(zip.data() + end64 + 48);
  }
  for (; index > 0; --index) {
    if (!has(entry, kCentral, 0x02014b50))
      return std::nullopt;
    const char *header = zip.data() + entry;
    entry += kCentral + read16le(header + 28) + read16le(header + 30) + read16le(header + 32);
  }
  if (!has(entry, kCentral, 0x02014b50))
    return std::nullopt;
  const char *header = zip.data() + entry;
  uint64_t nameSize = read16le(header + 28), extraSize = read16le(header + 30);
  if (zip.size() - entry - kCentral < nameSize + extraSize || zip.substr(entry + kCentral, nameSize) != name)
    return std::nullopt;
  uint64_t local = read32le(header + 42);
  if (local == kInZip64) {
    // The zip64 extra field holds the sizes before the offset, each only where it overflowed.
    llvm::StringRef extra = zip.substr(entry + kCentral + nameSize, extraSize);
    while (extra.size() >= 4 && read16le(extra.data()) != 1)
      extra = extra.substr(4 + read16le(extra.data() + 2)); // substr, not drop_front: may run past the end
    size_t at = 4 + 8 * (read32le(header + 24) == kInZip64) + 8 * (read32le(header + 20) == kInZip64);
    if (extra.size() < at + 8 || read16le(extra.data() + 2) < at + 4)
      return std::nullopt;
    local = read64le(extra.data() + at);
  }
  if (!has(local, kLocal, 0x04034b50) || read16le(zip.data() + local + 8) != ZIP_CM_STORE ||
      zip.substr(local + kLocal, read16le(zip.data() + local + 26)) != name)
    return std::nullopt;
  return local + kLocal + read16le(zip.data() + local + 26) + read16le(zip.data() + local + 28);
}

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
  // One entry per name: a second copy of a record would be read or skipped depending on the reader.
  llvm::StringSet<> names;
  for (zip_int64_t i = 0, n = zip_get_num_entries(zip, 0); i < n; ++i)
    if (const char *name = zip_get_name(zip, i, 0); name && !names.insert(name).second)
      return makeError("zip archive with two entries named {}", quoteRecordText(name));
  // PyTorchStreamReader reads ".data/version" where it is, "version" otherwise.
  llvm::StringRef versionRecord = impl->locate(".data/version") >= 0 ? ".data/version" : "version";
  if (impl->locate(versionRecord) < 0)
    return makeError("zip archive without a version record: not a torch.export.save archive");
  auto archive = std::unique_ptr<Pt2Archive>(new Pt2Archive(std::move(impl)));
  auto version = archive->read(versionRecord);
  if (!version)
    return version.takeError();
  if (llvm::Error err = checkFileFormatVersion(versionRecord, *version))
    return err;
  return archive;
}

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::open(llvm::StringRef path) {
  // Mapped, not read: a .pt2 with weights may be large, and only a few records are read.
  if (llvm::Error err = checkInputFile(path, kNoSizeBound))
    return err;
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

std::optional<llvm::StringRef> Pt2Archive::readInPlace(llvm::StringRef name, size_t trailing) const {
  constexpr zip_uint64_t kNeeded = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD | ZIP_STAT_CRC;
  zip_int64_t index = impl_->locate(name);
  zip_stat_t stat;
  if (index < 0 || zip_stat_index(impl_->zip.get(), index, 0, &stat) != 0 || (stat.valid & kNeeded) != kNeeded ||
      stat.comp_method != ZIP_CM_STORE || stat.comp_size != stat.size ||
      ((stat.valid & ZIP_STAT_ENCRYPTION_METHOD) && stat.encryption_method != ZIP_EM_NONE))
    return std::nullopt;
  llvm::StringRef zip = impl_->bytes->getBuffer();
  std::optional<uint64_t> start = dataOffset(zip, index, (impl_->root + name).str());
  if (!start || *start > zip.size() || zip.size() - *start < stat.size || zip.size() - *start - stat.size < trailing)
    return std::nullopt;
  llvm::StringRef data = zip.substr(*start, stat.size);
  // libdeflate's CRC-32 uses the CPU's carry-less multiply: zlib's took 3% of a large model's predict.
  if (libdeflate_crc32(0, data.data(), data.size()) != stat.crc)
    return std::nullopt;
  return data;
}

} // namespace commlens
