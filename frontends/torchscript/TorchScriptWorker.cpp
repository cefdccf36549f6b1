// commlens-torchscript-worker: the process commlens starts to read a TorchScript archive, which
// means running the model's code. It reads the archive from fd 0, loads libcommlens_torchscript
// (LibTorch) with dlopen, then limits itself before any of the archive is unpickled or run:
//   RLIMIT_AS     its address space once LibTorch is loaded, plus MEMORY_BYTES
//   RLIMIT_CPU    the CPU time it used to start, plus CPU_SECONDS (SIGXCPU, then SIGKILL 5 s on)
//   RLIMIT_NOFILE OPEN_FILES
//   RLIMIT_FSIZE  0: no byte is written to any file (SIGXFSZ)
//   RLIMIT_CORE   0
// and a seccomp filter refuses (EPERM/EACCES) opening files for writing or creating them,
// removing, renaming or linking files, sockets, exec, new processes and ptrace. The answer goes to
// fd 1 (frontends/TorchScriptWorkerProtocol.h); stderr is /dev/null. Not linked to LibTorch:
// nothing of it is loaded before the file descriptors are closed.
#include "frontends/TorchScriptWorkerProtocol.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace commlens::torchscript_worker;

void writeAll(const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = write(1, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      _exit(3);
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void writeString(const char *s, size_t size) {
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<uint64_t>(size) >> (8 * i));
  writeAll(reinterpret_cast<const char *>(length), 8);
  writeAll(s, size);
}

[[noreturn]] void answerError(char kind, const std::string &message) {
  writeAll(&kind, 1);
  writeString(message.data(), message.size());
  _exit(0);
}

uint64_t number(const char *text) {
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno || !end || *end || v == 0)
    answerError('E', std::string("worker: bad limit '") + text + "'");
  return v;
}

/// Every fd above the protocol's, whatever the caller left open without close-on-exec.
void closeOtherFds() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, kProgressFd + 1, ~0U, 0) == 0)
    return;
#endif
  std::vector<int> fds;
  if (DIR *d = opendir("/proc/self/fd")) {
    while (dirent *e = readdir(d))
      if (int fd = std::atoi(e->d_name); fd > kProgressFd && fd != dirfd(d))
        fds.push_back(fd);
    closedir(d);
  }
  for (int fd : fds)
    close(fd);
}

/// The address space and resident set now, in bytes (/proc/self/statm).
std::pair<uint64_t, uint64_t> memoryNow() {
  FILE *f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%llu %llu", &size, &resident) != 2)
      size = resident = 0;
    std::fclose(f);
  }
  auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return {size * page, resident * page};
}

void limit(int resource, rlim_t soft, rlim_t hard, const char *name) {
  rlimit r{soft, hard};
  if (setrlimit(resource, &r) != 0)
    answerError('E', std::string("worker: cannot set ") + name + ": " + std::strerror(errno));
}

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#endif

/// The seccomp filter: everything LibTorch computes with is allowed; what reaches past the worker
/// (creating, writing or removing files, sockets, exec, new processes, ptrace) fails with EPERM or
/// EACCES, which LibTorch reports as an error of the op.
void installSeccomp() {
#if defined(__x86_64__) || defined(__aarch64__)
  std::vector<sock_filter> f;
  auto stmt = [&](uint16_t code, uint32_t k) { f.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { f.push_back(BPF_JUMP(code, k, jt, jf)); };
  constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
  constexpr uint32_t kDenied = SECCOMP_RET_ERRNO | EPERM;
  constexpr uint32_t kNoAccess = SECCOMP_RET_ERRNO | EACCES;
  constexpr uint32_t kNoSys = SECCOMP_RET_ERRNO | ENOSYS;
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1); // the x32 ABI
  stmt(BPF_RET | BPF_K, kDenied);
#endif
  auto deny = [&](long nr, uint32_t action) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(BPF_RET | BPF_K, action);
  };
  // Opening for writing or creating: flags argument `arg` has a write bit.
  constexpr uint32_t kWriteFlags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | (O_TMPFILE & ~O_DIRECTORY);
  auto denyWriteOpen = [&](long nr, int arg) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4);
    stmt(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * arg));
    jump(BPF_JMP | BPF_JSET | BPF_K, kWriteFlags, 0, 1);
    stmt(BPF_RET | BPF_K, kNoAccess);
    stmt(BPF_RET | BPF_K, kAllow);
  };
#ifdef SYS_open
  denyWriteOpen(SYS_open, 1);
#endif
  denyWriteOpen(SYS_openat, 2);
  // clone: threads only (CLONE_THREAD in its flags, the first argument); clone3 hides its flags
  // in memory, so it is reported missing and glibc falls back to clone.
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args));
  jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
  stmt(BPF_RET | BPF_K, kAllow);
  stmt(BPF_RET | BPF_K, kDenied);
#ifdef SYS_clone3
  deny(SYS_clone3, kNoSys);
#endif
#ifdef SYS_openat2
  deny(SYS_openat2, kNoSys);
#endif
  for (long nr : {
#ifdef SYS_creat
           static_cast<long>(SYS_creat),
#endif
#ifdef SYS_fork
           static_cast<long>(SYS_fork), static_cast<long>(SYS_vfork),
#endif
#ifdef SYS_unlink
           static_cast<long>(SYS_unlink), static_cast<long>(SYS_rmdir), static_cast<long>(SYS_rename),
           static_cast<long>(SYS_mkdir), static_cast<long>(SYS_link), static_cast<long>(SYS_symlink),
           static_cast<long>(SYS_chmod), static_cast<long>(SYS_chown), static_cast<long>(SYS_lchown),
           static_cast<long>(SYS_mknod),
#endif
           static_cast<long>(SYS_unlinkat), static_cast<long>(SYS_renameat), static_cast<long>(SYS_renameat2),
           static_cast<long>(SYS_mkdirat), static_cast<long>(SYS_linkat), static_cast<long>(SYS_symlinkat),
           static_cast<long>(SYS_mknodat), static_cast<long>(SYS_truncate), static_cast<long>(SYS_ftruncate),
           static_cast<long>(SYS_fchmod), static_cast<long>(SYS_fchmodat), static_cast<long>(SYS_fchown),
           static_cast<long>(SYS_fchownat), static_cast<long>(SYS_socket), static_cast<long>(SYS_socketpair),
           static_cast<long>(SYS_connect), static_cast<long>(SYS_bind), static_cast<long>(SYS_listen),
           static_cast<long>(SYS_accept), static_cast<long>(SYS_accept4), static_cast<long>(SYS_execve),
           static_cast<long>(SYS_execveat), static_cast<long>(SYS_ptrace), static_cast<long>(SYS_process_vm_writev),
           static_cast<long>(SYS_kill), static_cast<long>(SYS_io_uring_setup), static_cast<long>(SYS_mount),
           static_cast<long>(SYS_umount2), static_cast<long>(SYS_chroot), static_cast<long>(SYS_pivot_root),
           static_cast<long>(SYS_setxattr), static_cast<long>(SYS_lsetxattr), static_cast<long>(SYS_fsetxattr),
           static_cast<long>(SYS_removexattr), static_cast<long>(SYS_lremovexattr),
           static_cast<long>(SYS_fremovexattr), static_cast<long>(SYS_memfd_create)})
    deny(nr, kDenied);
  stmt(BPF_RET | BPF_K, kAllow);
  sock_fprog program{static_cast<unsigned short>(f.size()), f.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
    answerError('E', std::string("worker: cannot install its seccomp filter: ") + std::strerror(errno));
#else
#error "the TorchScript worker's seccomp filter knows x86-64 and AArch64"
#endif
}

using Convert = int (*)(const char *, size_t, char **, char **, char **);
using Free = void (*)(char *);
using SetProgress = void (*)(char *, size_t);
using Init = void (*)();

} // namespace

int main(int argc, char **argv) {
  if (argc != 5)
    answerError('E', "usage: commlens-torchscript-worker LIBRARY MEMORY_BYTES CPU_SECONDS OPEN_FILES");
  closeOtherFds();
  uint64_t memory = number(argv[2]), cpu = number(argv[3]), files = number(argv[4]);
  // Few malloc arenas: each thread's 64 MiB arena reservation would count against RLIMIT_AS.
  mallopt(M_ARENA_MAX, 2);

  std::string archive;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = read(0, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      answerError('E', std::string("worker: cannot read the archive: ") + std::strerror(errno));
    if (n == 0)
      break;
    archive.append(buffer, static_cast<size_t>(n));
  }
  void *page = mmap(nullptr, kProgressPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, kProgressFd, 0);
  if (page == MAP_FAILED)
    answerError('E', std::string("worker: cannot map the progress page: ") + std::strerror(errno));
  close(kProgressFd);

  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    answerError('E', std::string("cannot load the TorchScript frontend ") + argv[1] + ": " + (why ? why : "?"));
  }
  auto convert = reinterpret_cast<Convert>(dlsym(lib, "commlens_torchscript_to_program_json"));
  auto release = reinterpret_cast<Free>(dlsym(lib, "commlens_torchscript_free"));
  auto setProgress = reinterpret_cast<SetProgress>(dlsym(lib, "commlens_torchscript_set_progress"));
  auto init = reinterpret_cast<Init>(dlsym(lib, "commlens_torchscript_init"));
  if (!convert || !release || !setProgress || !init)
    answerError('E', std::string(argv[1]) + " lacks the commlens_torchscript entry points");
  char *progress = static_cast<char *>(page) + kProgressTextOffset;
  setProgress(progress, kProgressPageSize - kProgressTextOffset);
  init();

  // The limits, from here on: nothing of the archive has been unpickled or run yet.
  auto [base, resident] = memoryNow();
  std::memcpy(page, &base, sizeof base);
  std::memcpy(static_cast<char *>(page) + 8, &resident, sizeof resident);
  rusage used{};
  getrusage(RUSAGE_SELF, &used);
  rlim_t cpuUsed = static_cast<rlim_t>(used.ru_utime.tv_sec + used.ru_stime.tv_sec + 1);
  limit(RLIMIT_CPU, cpuUsed + cpu, cpuUsed + cpu + 5, "RLIMIT_CPU");
  limit(RLIMIT_AS, base + memory, base + memory, "RLIMIT_AS");
  limit(RLIMIT_NOFILE, files, files, "RLIMIT_NOFILE");
  limit(RLIMIT_FSIZE, 0, 0, "RLIMIT_FSIZE");
  limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  installSeccomp();

  char *program = nullptr, *weights = nullptr, *error = nullptr;
  int rc = convert(archive.data(), archive.size(), &program, &weights, &error);
  if (rc != 0)
    answerError(rc == 2 ? 'M' : 'E', error ? error : "");
  writeAll("O", 1);
  writeString(program, std::strlen(program));
  writeString(weights, std::strlen(weights));
  _exit(0); // LibTorch's static destructors have nothing to do for us
}
