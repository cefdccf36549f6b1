// A stand-in for libcommlens_torchscript.so (test_torchscript_trust.py): its "conversion" tries what
// the worker must not allow and reports each outcome as its error message.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
extern "C" {
static void *nothing(void *) { return nullptr; }
int commlens_torchscript_to_program_json(const char *, size_t, char **, char **, char **error) {
  if (getenv("FAKE_ASSERT")) { // LibTorch's text for a failed internal check, as prim::Print gave it
    *error = strdup("'prim::Print' in M failed: 0 INTERNAL ASSERT FAILED at \".../ivalue.h\":663, please report a "
                    "bug to PyTorch. expected int");
    return 1;
  }
  const char *target = getenv("FAKE_TARGET");
  char out[1024];
  int created = open(target, O_WRONLY | O_CREAT, 0644);
  int createdErrno = errno;
  int readable = open("/etc/hostname", O_RDONLY);
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  int sockErrno = errno;
  pid_t child = fork();
  if (child == 0) _exit(0);
  int forkErrno = errno;
  pthread_t t;
  int thread = pthread_create(&t, nullptr, nothing, nullptr);
  if (thread == 0) pthread_join(t, nullptr);
  int removed = unlink(getenv("FAKE_EXISTING"));
  int removedErrno = errno;
  snprintf(out, sizeof out, "create %s; read %s; socket %s; fork %s; thread %s; unlink %s",
           created < 0 ? strerror(createdErrno) : "ok", readable < 0 ? "failed" : "ok",
           sock < 0 ? strerror(sockErrno) : "ok", child < 0 ? strerror(forkErrno) : "ok", thread ? strerror(thread) : "ok",
           removed < 0 ? strerror(removedErrno) : "ok");
  *error = strdup(out);
  return 1;
}
void commlens_torchscript_free(char *p) { free(p); }
void commlens_torchscript_set_progress(char *, size_t) {}
void commlens_torchscript_init(void) {}
}
