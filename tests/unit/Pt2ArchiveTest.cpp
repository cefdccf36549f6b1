// The .pt2 archive reader on a memory buffer (Pt2Archive::openBuffer, loadPt2Buffer), on zip
// archives built here byte by byte (stored entries, as torch.export.save writes them; zip64 too).
#include "frontends/Pt2Archive.h"
#include "frontends/Pt2Loader.h"

#include "llvm/Support/CRC.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace commlens;

namespace {

void put16(std::string &out, uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string &out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

void put64(std::string &out, uint64_t v) {
  put32(out, static_cast<uint32_t>(v));
  put32(out, static_cast<uint32_t>(v >> 32));
}

/// A zip archive of stored (uncompressed) entries: local headers and data, the central
/// directory, the end record. `zip64`: sizes and offsets in zip64 extra fields and a zip64 end
/// record (what a writer does past 4 GiB, and torch always for the end record). `deflated`: each
/// entry's data in one stored block of a deflate stream (method 8, as a compressor leaves data it
/// cannot shrink). `centralExtraBefore`: bytes put before the zip64 field in each central
/// directory record's extra area (other extra fields).
std::string zipOf(const std::vector<std::pair<std::string, std::string>> &entries, bool zip64 = false,
                  bool deflated = false, const std::string &centralExtraBefore = "") {
  constexpr uint32_t kInExtra = 0xffffffff;
  const uint32_t method = deflated ? 8 : 0;
  std::string out, central;
  for (const auto &[name, uncompressed] : entries) {
    uint32_t crc = llvm::crc32(llvm::arrayRefFromStringRef(uncompressed));
    std::string data = uncompressed;
    if (deflated) {
      std::string block(1, '\x01'); // the final block, stored
      put16(block, static_cast<uint32_t>(data.size()));
      put16(block, ~static_cast<uint32_t>(data.size()) & 0xffff);
      data = block + data;
    }
    uint64_t offset = out.size();
    uint32_t size = zip64 ? kInExtra : static_cast<uint32_t>(uncompressed.size());
    uint32_t compressedSize = zip64 ? kInExtra : static_cast<uint32_t>(data.size());
    put32(out, 0x04034b50);
    put16(out, zip64 ? 45 : 20); // version needed
    put16(out, 0);               // flags
    put16(out, method);
    put32(out, 0);               // time, date
    put32(out, crc);
    put32(out, compressedSize);
    put32(out, size);
    put16(out, static_cast<uint32_t>(name.size()));
    put16(out, zip64 ? 20 : 0); // extra
    out += name;
    if (zip64) {
      put16(out, 1); // zip64 extended information: sizes
      put16(out, 16);
      put64(out, uncompressed.size());
      put64(out, data.size());
    }
    out += data;
    put32(central, 0x02014b50);
    put16(central, zip64 ? 45 : 20); // version made by
    put16(central, zip64 ? 45 : 20); // version needed
    put16(central, 0); // flags
    put16(central, method);
    put32(central, 0); // time, date
    put32(central, crc);
    put32(central, compressedSize);
    put32(central, size);
    put16(central, static_cast<uint32_t>(name.size()));
    put16(central, zip64 ? 28 + static_cast<uint32_t>(centralExtraBefore.size()) : 0); // extra
    put16(central, 0);              // comment
    put16(central, 0);              // disk
    put16(central, 0);              // internal attributes
    put32(central, 0);              // external attributes
    put32(central, zip64 ? kInExtra : static_cast<uint32_t>(offset));
    central += name;
    if (zip64) {
      central += centralExtraBefore;
      put16(central, 1); // zip64 extended information: sizes, offset
      put16(central, 24);
      put64(central, uncompressed.size());
      put64(central, data.size());
      put64(central, offset);
    }
  }
  uint64_t centralOffset = out.size();
  out += central;
  if (zip64) {
    uint64_t end64Offset = out.size();
    put32(out, 0x06064b50); // zip64 end of central directory record
    put64(out, 44);         // its size after this field
    put16(out, 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, entries.size());
    put64(out, entries.size());
    put64(out, central.size());
    put64(out, centralOffset);
    put32(out, 0x07064b50); // zip64 end of central directory locator
    put32(out, 0);
    put64(out, end64Offset);
    put32(out, 1); // disks
  }
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, zip64 ? 0xffff : static_cast<uint32_t>(entries.size()));
  put16(out, zip64 ? 0xffff : static_cast<uint32_t>(entries.size()));
  put32(out, zip64 ? kInExtra : static_cast<uint32_t>(central.size()));
  put32(out, zip64 ? kInExtra : static_cast<uint32_t>(centralOffset));
  put16(out, 0); // comment
  return out;
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  EXPECT_FALSE(static_cast<bool>(value));
  return value ? std::string("(no error)") : llvm::toString(value.takeError());
}

} // namespace

TEST(Pt2Archive, OpenBufferReadsRecords) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip");
    auto archive = Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}, zip64));
    ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
    auto records = (*archive)->records();
    ASSERT_TRUE(static_cast<bool>(records)) << llvm::toString(records.takeError());
    EXPECT_EQ(*records, (std::vector<std::string>{"version", "models/model.json"}));
    EXPECT_TRUE((*archive)->hasRecord("models/model.json"));
    EXPECT_FALSE((*archive)->hasRecord("models/other.json"));
    auto text = (*archive)->read("models/model.json");
    ASSERT_TRUE(static_cast<bool>(text)) << llvm::toString(text.takeError());
    EXPECT_EQ(*text, "{}");
    EXPECT_EQ(errorOf((*archive)->read("models/other.json")), "cannot read record 'models/other.json': no such record");
  }
}

TEST(Pt2Archive, OpenBufferRefusesWhatIsNoZip) {
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer("{}")), "not a zip archive (expected a torch.export.save .pt2 file)");
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer("")), "not a zip archive (expected a torch.export.save .pt2 file)");
}

TEST(Pt2Archive, OpenBufferRefusesZipsThatAreNoTorchExportArchive) {
  std::string zip = zipOf({{"model/version", "1\n"}});
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer(zip.substr(0, zip.size() - 10))),
            "broken zip archive: no end of central directory record (truncated?)");
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer(zipOf({}))), "empty zip archive: not a torch.export.save archive");
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer(zipOf({{"version", "1\n"}}))),
            "zip archive without a root folder (torch.export archives from torch <= 2.7 are not supported)");
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer(zipOf({{"model/models/model.json", "{}"}}))),
            "zip archive without a version record: not a torch.export.save archive");
}

TEST(Pt2Archive, ReadChecksTheCrc) {
  std::string zip = zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}});
  zip[zip.find("{}")] = '[';
  auto archive = Pt2Archive::openBuffer(zip);
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  EXPECT_EQ(errorOf((*archive)->read("models/model.json")), "cannot read record 'models/model.json': CRC error");
  EXPECT_EQ((*archive)->readInPlace("models/model.json", 0), std::nullopt);
}

// A stored record is read where it lies, up to its end, when enough of the archive follows it;
// one the archive compresses, or one too near its end, is read() instead.
TEST(Pt2Archive, ReadInPlace) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip");
    auto archive = Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}, zip64));
    ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
    llvm::StringRef bytes = (*archive)->bytes();
    std::optional<llvm::StringRef> text = (*archive)->readInPlace("models/model.json", 64);
    ASSERT_TRUE(text.has_value());
    EXPECT_EQ(*text, "{}");
    EXPECT_TRUE(text->begin() >= bytes.begin() && text->end() + 64 <= bytes.end());
    EXPECT_EQ((*archive)->readInPlace("models/model.json", bytes.end() - text->end() + 1), std::nullopt);
    EXPECT_EQ((*archive)->readInPlace("models/other.json", 0), std::nullopt);
  }
  auto deflated =
      Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}, false, /*deflated=*/true));
  ASSERT_TRUE(static_cast<bool>(deflated)) << llvm::toString(deflated.takeError());
  EXPECT_EQ((*deflated)->readInPlace("models/model.json", 0), std::nullopt);
  auto text = (*deflated)->read("models/model.json");
  ASSERT_TRUE(static_cast<bool>(text)) << llvm::toString(text.takeError());
  EXPECT_EQ(*text, "{}");
}

// Found by fuzz/pt2_archive (with LibTorch's reader, which checked it only when it listed the
// records, and threw out of records()): records() fails, the archive opens.
TEST(Pt2Archive, RecordOutsideTheRootFolderIsAnError) {
  auto archive = Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"other/data.pkl", "x"}}));
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  EXPECT_EQ(errorOf((*archive)->records()), "cannot list records: entry other/data.pkl is not in the root folder model/");
}

TEST(Pt2Archive, LoadPt2BufferNamesTheRecordAtFault) {
  EXPECT_EQ(errorOf(loadPt2Buffer(zipOf({{"model/version", "1\n"}}))),
            "no models/model.json record: not a torch.export.save archive");
  for (bool deflated : {false, true}) { // the record parsed in place, and copied out
    SCOPED_TRACE(deflated ? "deflated" : "stored");
    EXPECT_EQ(errorOf(loadPt2Buffer(
                  zipOf({{"model/version", "1\n"}, {"model/models/model.json", "[1e999]"}}, false, deflated))),
              "models/model.json: invalid JSON: number overflow parsing '1e999'");
  }
}

// The in-place reader walks the central directory's extra fields itself to find the zip64 one
// (a writer may put others first). A field whose stated length runs past the extra area must end
// the walk without reading past it: libzip refuses such an archive when it opens it.
TEST(Pt2Archive, ReadInPlaceWalksOtherExtraFields) {
  std::string other("\x55\x54\x05\x00\x03\x00\x00\x00\x00", 9); // extended timestamp, 5 bytes
  auto archive = Pt2Archive::openBuffer(
      zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}, /*zip64=*/true, false, other));
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  EXPECT_EQ((*archive)->readInPlace("models/model.json", 0), std::optional<llvm::StringRef>("{}"));

  std::string runsPast("\x55\x54\xff\xff\x03", 5); // says 65535 bytes follow
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer(
                zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}, true, false, runsPast))),
            "broken zip archive: Zip archive inconsistent");
}

// The zip format version as PyTorchStreamReader reads it (caffe2/serialize/inline_container.cc,
// versions.h: 1 to 10), ".data/version" before "version"; a name given to two entries.
TEST(Pt2Archive, VersionRecordAndDuplicateEntries) {
  auto openError = [](const std::string &zip) {
    auto archive = Pt2Archive::openBuffer(zip);
    return archive ? std::string("(opened)") : llvm::toString(archive.takeError());
  };
  auto withVersion = [&](const std::string &record, const std::string &text) {
    return openError(zipOf({{"model/" + record, text}, {"model/models/model.json", "{}"}}));
  };
  EXPECT_EQ(withVersion(".data/version", "10\n"), "(opened)");
  EXPECT_EQ(withVersion("version", " 1 "), "(opened)");
  EXPECT_EQ(withVersion(".data/version", "11\n"), ".data/version is '11': torch 2.13 reads versions 1 to 10");
  EXPECT_EQ(withVersion(".data/version", "18446744073709551616"),
            ".data/version is '18446744073709551616': torch 2.13 reads versions 1 to 10");
  EXPECT_EQ(withVersion("version", "6 apples"), "version is '6 apples', not a version number");
  EXPECT_EQ(withVersion("version", std::string(50, 'x') + "\n"),
            "version is '" + std::string(40, 'x') + "'..., not a version number");
  EXPECT_EQ(openError(zipOf({{"model/version", "garbage"}, {"model/.data/version", "6\n"}, {"model/models/model.json", "{}"}})),
            "(opened)");
  EXPECT_EQ(openError(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}, {"model/models/model.json", "{"}})),
            "zip archive with two entries named 'model/models/model.json'");
}

// TorchScript only on request: an archive whose records are torch.jit.save's (data.pkl, code/),
// whatever it is named, is refused before the frontend is looked for or anything is unpickled.
TEST(TorchScript, RefusedWithoutTheOptIn) {
  std::string zip = zipOf({{"m/version", "1\n"}, {"m/data.pkl", "x"}, {"m/code/__torch__.py", "class M:\n"}});
  auto archive = Pt2Archive::openBuffer(zip);
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  EXPECT_TRUE(isTorchScriptArchive(**archive));
  EXPECT_EQ(errorOf(loadPt2Buffer(zip)), torchScriptRefusal());
  EXPECT_EQ(errorOf(convertTorchScript(**archive, TorchScriptOptions{})), torchScriptRefusal());
  EXPECT_NE(torchScriptRefusal().find("--torchscript"), std::string::npos);
  EXPECT_EQ(torchScriptRefusal().find('\n'), std::string::npos);
}

TEST(TorchScript, ByteSizes) {
  EXPECT_EQ(parseByteSize("4G"), uint64_t{4} << 30);
  EXPECT_EQ(parseByteSize("512M"), uint64_t{512} << 20);
  EXPECT_EQ(parseByteSize("64k"), uint64_t{64} << 10);
  EXPECT_EQ(parseByteSize("1000"), uint64_t{1000});
  for (const char *bad : {"", "0", "G", "-1", "1.5G", "4GB", "9999999T"})
    EXPECT_EQ(parseByteSize(bad), std::nullopt) << bad;
}

TEST(TorchScript, DefaultLimitsAreSizedFromTheArchiveAndInputs) {
  // 1 MiB archive, inputs of 32 bytes in 8 elements.
  TorchScriptLimits l = defaultTorchScriptLimits({}, 1 << 20, 32, 8);
  uint64_t memory = (uint64_t{2} << 30) + (2 << 20) + 256 * 32;
  EXPECT_LE(*l.memoryBytes, memory); // at most 3/4 of the RAM
  EXPECT_EQ(*l.cpuSeconds, 61u);     // 60 + ceil(2^18 weights x 8 elements / 1e9)
  EXPECT_EQ(*l.openFiles, 32u);
  EXPECT_EQ(*l.wallSeconds, 91u);
  TorchScriptLimits big = defaultTorchScriptLimits({}, uint64_t{40} << 30, 0, 4096); // 40 GiB of weights
  EXPECT_EQ(*big.cpuSeconds, 44041u); // 60 + ceil(40 GiB / 4 x 4096 / 1e9) = 60 + 43981
  TorchScriptLimits given = defaultTorchScriptLimits({uint64_t{1} << 28, 5, 8, std::nullopt}, 1 << 20, 32, 8);
  EXPECT_EQ(*given.memoryBytes, uint64_t{1} << 28);
  EXPECT_EQ(*given.cpuSeconds, 5u);
  EXPECT_EQ(*given.openFiles, 8u);
  EXPECT_EQ(*given.wallSeconds, 35u);
}
