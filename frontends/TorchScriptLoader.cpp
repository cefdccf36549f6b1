#include "frontends/TorchScriptLoader.h"

#include "frontends/TorchScriptWorkerProtocol.h"
#include "ir/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

extern char **environ;

namespace commlens {
namespace {

using namespace torchscript_worker;

constexpr llvm::StringLiteral kLibrary = "libcommlens_torchscript.so";
constexpr llvm::StringLiteral kInputsRecord = "extra/commlens_inputs.json";

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

/// The library and the worker beside it.
llvm::Expected<std::pair<std::string, std::string>> findFrontend() {
  std::vector<std::string> paths = candidatePaths();
  for (const std::string &path : paths) {
    if (!llvm::sys::fs::exists(path))
      continue;
    llvm::SmallString<256> worker(llvm::sys::path::parent_path(path));
    llvm::sys::path::append(worker, kWorkerName);
    if (!llvm::sys::fs::can_execute(worker))
      return makeError("the TorchScript worker {} is not installed beside {}", kWorkerName, path);
    llvm::SmallString<256> absolute(path);
    llvm::sys::fs::make_absolute(absolute);
    return std::pair{std::string(absolute), std::string(worker)};
  }
  return makeError("the TorchScript frontend {} is not installed (looked in {})", kLibrary.str(),
                   llvm::join(paths, ", "));
}

std::string bytesText(uint64_t b) {
  constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;
  if (b >= kGiB && b % kGiB == 0)
    return fmt::format("{} GiB", b / kGiB);
  if (b >= kMiB && b % kMiB == 0)
    return fmt::format("{} MiB", b / kMiB);
  if (b >= kGiB)
    return fmt::format("{:.1f} GiB", static_cast<double>(b) / kGiB);
  if (b >= kMiB)
    return fmt::format("{:.1f} MiB", static_cast<double>(b) / kMiB);
  return fmt::format("{} bytes", b);
}

/// The inputs' bytes and elements commlens_inputs.json asks for (0, 0 when it cannot be read:
/// the worker names what is wrong with it).
std::pair<uint64_t, uint64_t> recordedInputs(const Pt2Archive &archive) {
  if (!archive.hasRecord(kInputsRecord))
    return {0, 0};
  auto text = archive.read(kInputsRecord);
  if (!text) {
    llvm::consumeError(text.takeError());
    return {0, 0};
  }
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  uint64_t bytes = 0, elements = 0;
  if (!doc.is_object() || !doc.contains("inputs") || !doc["inputs"].is_array())
    return {0, 0};
  for (const nlohmann::json &in : doc["inputs"]) {
    if (!in.is_object() || !in.contains("shape") || !in["shape"].is_array())
      continue;
    double n = 1;
    for (const nlohmann::json &d : in["shape"])
      n *= d.is_number_integer() ? std::max<double>(0, d.get<double>()) : 0;
    std::string dtype = in.contains("dtype") && in["dtype"].is_string() ? in["dtype"].get<std::string>() : "";
    int size = dtype == "float64" || dtype == "int64" ? 8 : dtype == "int16" || dtype == "float16" || dtype == "bfloat16" ? 2
               : dtype == "int8" || dtype == "uint8" || dtype == "bool" ? 1 : 4;
    n = std::min(n, 1e18);
    elements += static_cast<uint64_t>(n);
    bytes += static_cast<uint64_t>(std::min(n * size, 1e18));
  }
  return {bytes, elements};
}

uint64_t physicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
}

/// A pipe end for one direction with a deadline: whole transfers, or why not.
struct Deadline {
  std::chrono::steady_clock::time_point at;
  int msLeft() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - std::chrono::steady_clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
  }
};

enum class Io { Done, Closed, TimedOut, Failed };

Io sendAll(int fd, const char *data, size_t size, const Deadline &deadline) {
  while (size > 0) {
    pollfd p{fd, POLLOUT, 0};
    int r = poll(&p, 1, deadline.msLeft());
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0)
      return Io::TimedOut;
    if (r < 0)
      return Io::Failed;
    ssize_t n = send(fd, data, std::min<size_t>(size, 1 << 20), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0)
      return errno == EPIPE || errno == ECONNRESET ? Io::Closed : Io::Failed;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Io::Done;
}

Io readAll(int fd, std::string &out, const Deadline &deadline) {
  char buffer[1 << 16];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, deadline.msLeft());
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0)
      return Io::TimedOut;
    if (r < 0)
      return Io::Failed;
    ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0)
      return errno == ECONNRESET ? Io::Done : Io::Failed;
    if (n == 0)
      return Io::Done;
    out.append(buffer, static_cast<size_t>(n));
  }
}

/// A u64-length-prefixed string of the response at `pos`.
bool takeString(llvm::StringRef response, size_t &pos, std::string &out) {
  if (response.size() - pos < 8)
    return false;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(response[pos + i])) << (8 * i);
  pos += 8;
  if (response.size() - pos < n)
    return false;
  out = response.substr(pos, n).str();
  pos += n;
  return true;
}

/// LibTorch's text that must not reach the user, whatever path an error took.
std::string inCommlensWords(std::string message) {
  for (const char *leak : {"INTERNAL ASSERT FAILED", "please report a bug to PyTorch"})
    if (message.find(leak) != std::string::npos)
      return "LibTorch failed an internal check on this model (commlens cannot convert it)";
  return message.substr(0, message.find('\n'));
}

/// RAII for the worker's resources on this side.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// fd moved above 3 (the worker's fds 0-3 are set from these), close-on-exec.
int highFd(int fd) {
  if (fd < 0 || fd > kProgressFd)
    return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return moved;
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

std::string torchScriptRefusal() {
  return "a TorchScript archive (torch.jit.save), which commlens can only read by running the model's code: "
         "pass --torchscript (commlens.predict: torchscript=True) to convert it in a worker process under "
         "resource limits, only for files you trust (README.md, Security and trust)";
}

TorchScriptLimits defaultTorchScriptLimits(const TorchScriptLimits &given, uint64_t archiveBytes, uint64_t inputBytes,
                                           uint64_t inputElements) {
  TorchScriptLimits out = given;
  if (!out.memoryBytes) {
    double bytes = 2.0 * (1ull << 30) + 2.0 * static_cast<double>(archiveBytes) + 256.0 * static_cast<double>(inputBytes);
    if (uint64_t ram = physicalMemory())
      bytes = std::min(bytes, 0.75 * static_cast<double>(ram));
    out.memoryBytes = static_cast<uint64_t>(std::min(bytes, 1e18));
  }
  if (!out.cpuSeconds) {
    double macs = static_cast<double>(archiveBytes) / 4 * static_cast<double>(std::max<uint64_t>(1, inputElements));
    out.cpuSeconds = 60 + static_cast<uint64_t>(std::min(std::ceil(macs / 1e9), 1e9));
  }
  if (!out.openFiles)
    out.openFiles = 32;
  if (!out.wallSeconds)
    out.wallSeconds = *out.cpuSeconds + 30;
  return out;
}

std::optional<uint64_t> parseByteSize(llvm::StringRef text) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
    case 'K': case 'k': scale = 1ull << 10; break;
    case 'M': case 'm': scale = 1ull << 20; break;
    case 'G': case 'g': scale = 1ull << 30; break;
    case 'T': case 't': scale = 1ull << 40; break;
    default: break;
    }
    if (scale != 1)
      text = text.drop_back();
  }
  uint64_t n = 0;
  if (text.getAsInteger(10, n) || n == 0 || n > (uint64_t{1} << 50) / scale)
    return std::nullopt;
  return n * scale;
}

llvm::Expected<TorchScriptProgram> convertTorchScript(const Pt2Archive &archive, const TorchScriptOptions &options) {
  if (!options.enabled)
    return makeError("{}", torchScriptRefusal());
  auto frontend = findFrontend();
  if (!frontend)
    return frontend.takeError();
  const auto &[library, worker] = *frontend;
  llvm::StringRef bytes = archive.bytes();
  auto [inputBytes, inputElements] = recordedInputs(archive);
  TorchScriptLimits limits = defaultTorchScriptLimits(options.limits, bytes.size(), inputBytes, inputElements);

  // The shared progress page (fd 3 in the worker) and the socket pair (fds 0 and 1).
  Fd progressFd{highFd(memfd_create("commlens-torchscript-progress", MFD_CLOEXEC))};
  if (progressFd.fd < 0 || ftruncate(progressFd.fd, kProgressPageSize) != 0)
    return makeError("TorchScript: cannot create the worker's progress page: {}", std::strerror(errno));
  void *page = mmap(nullptr, kProgressPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, progressFd.fd, 0);
  if (page == MAP_FAILED)
    return makeError("TorchScript: cannot map the worker's progress page: {}", std::strerror(errno));
  auto unmap = llvm::make_scope_exit([&] { munmap(page, kProgressPageSize); });
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return makeError("TorchScript: cannot create the worker's socket: {}", std::strerror(errno));
  Fd ours{highFd(pair[0])}, theirs{highFd(pair[1])};
  if (ours.fd < 0 || theirs.fd < 0)
    return makeError("TorchScript: cannot create the worker's socket: {}", std::strerror(errno));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, theirs.fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, progressFd.fd, kProgressFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Default dispositions and an empty mask, whatever the caller (Python ignores SIGPIPE) set.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::string memoryArg = std::to_string(*limits.memoryBytes), cpuArg = std::to_string(*limits.cpuSeconds),
              filesArg = std::to_string(*limits.openFiles);
  std::vector<char *> argv = {const_cast<char *>(worker.c_str()), const_cast<char *>(library.c_str()),
                              memoryArg.data(), cpuArg.data(), filesArg.data(), nullptr};
  auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, worker.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0)
    return makeError("TorchScript: cannot start the worker {}: {}", worker, std::strerror(spawned));
  ::close(theirs.fd);
  theirs.fd = -1;

  Deadline deadline{start + std::chrono::seconds(*limits.wallSeconds)};
  std::string response;
  Io sent = sendAll(ours.fd, bytes.data(), bytes.size(), deadline);
  shutdown(ours.fd, SHUT_WR);
  Io read = sent == Io::TimedOut ? Io::TimedOut : readAll(ours.fd, response, deadline);
  bool killedForTime = read == Io::TimedOut;
  if (killedForTime || read == Io::Failed)
    kill(pid, SIGKILL);
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  TorchScriptProgram out;
  out.stats.peakRssBytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  out.stats.cpuSeconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  out.stats.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stats.limits = limits;

  uint64_t baseline = 0, residentAtStart = 0;
  std::memcpy(&baseline, page, sizeof baseline);
  std::memcpy(&residentAtStart, static_cast<const char *>(page) + 8, sizeof residentAtStart);
  out.stats.addressSpaceAtStart = baseline;
  out.stats.residentAtStart = residentAtStart;
  const char *progressText = static_cast<const char *>(page) + kProgressTextOffset;
  std::string where(progressText, strnlen(progressText, kProgressPageSize - kProgressTextOffset - 1));
  where = where.empty() ? "before the conversion started" : inCommlensWords(where);
  if (llvm::sys::Process::GetEnv("COMMLENS_TORCHSCRIPT_STATS"))
    llvm::errs() << fmt::format("commlens: TorchScript worker: peak RSS {} bytes (at start {}), CPU {:.2f} s, wall "
                                "{:.2f} s; limits: memory {} bytes beyond the address space at start ({}), CPU {} s, "
                                "{} open files, wall {} s\n",
                                out.stats.peakRssBytes, residentAtStart, out.stats.cpuSeconds, out.stats.wallSeconds,
                                *limits.memoryBytes, baseline, *limits.cpuSeconds, *limits.openFiles,
                                *limits.wallSeconds);

  std::string memoryLimit = fmt::format("the memory limit of {} (--torchscript-memory)", bytesText(*limits.memoryBytes));
  if (killedForTime)
    return makeError("TorchScript: the wall-clock limit of {} s (--torchscript-wall-seconds) ran out {}",
                     *limits.wallSeconds, where);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGXCPU || (sig == SIGKILL && out.stats.cpuSeconds >= static_cast<double>(*limits.cpuSeconds)))
      return makeError("TorchScript: the CPU-time limit of {} s (--torchscript-cpu-seconds) ran out {}",
                       *limits.cpuSeconds, where);
    if (sig == SIGXFSZ)
      return makeError("TorchScript: the model tried to write a file {} (the worker writes no files)", where);
    if (sig == SIGSYS)
      return makeError("TorchScript: the model made a system call the worker does not allow (file creation, "
                       "network, processes) {}",
                       where);
    if (sig == SIGKILL)
      return makeError("TorchScript: the worker was killed {} (by the system's out-of-memory killer?); "
                       "lower --torchscript-memory",
                       where);
    return makeError("TorchScript: the worker crashed ({}) {}", strsignal(sig), where);
  }
  llvm::StringRef r(response);
  size_t pos = 1;
  if (r.empty())
    return makeError("TorchScript: the worker ended without an answer (exit status {}) {}",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, where);
  std::string first, second;
  switch (r[0]) {
  case 'O':
    if (takeString(r, pos, first) && takeString(r, pos, second)) {
      out.programJson = std::move(first);
      out.weightsConfigJson = std::move(second);
      return out;
    }
    break;
  case 'E':
    if (takeString(r, pos, first))
      return makeError("TorchScript: {}", inCommlensWords(first));
    break;
  case 'M':
    if (takeString(r, pos, first))
      return makeError("TorchScript: {} ran out {}{}", memoryLimit, where, first.empty() ? "" : ", " + first);
    break;
  default: break;
  }
  return makeError("TorchScript: the worker's answer is malformed (exit status {})",
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

} // namespace commlens
