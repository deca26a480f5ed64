// evk-runner: the only process that loads a kernel library. It has no interpreter and reports no figure:
// it calls the kernel's entry point when asked and says when it has returned. Everything it is told and
// everything it answers lives in one shared "arena" that the trusted worker maps too (see runner.py):
// the worker writes the inputs, the parameter structs and a request there while this process is stopped
// (SIGSTOP), starts the clock and continues it (SIGCONT); this program serves the request, writes the
// request's sequence number back and stops itself. The worker's clock stops when the operating system says
// that this process has stopped (every thread of it), and only then does the worker read the outputs. Times come from the worker's clock; this program has none to give.
//
//   evk-runner ARENA_FD ARENA_BYTES
//
// Before the kernel is loaded a seccomp filter refuses what no kernel needs (debugging other processes,
// reading or writing their memory, new processes, sockets, namespaces, io_uring) and writable executable
// memory; once it is loaded a second filter refuses new executable memory and opening files.
//
// Built with -DEVK_CUDA (runner.py's build_runner) it runs CUDA kernels: it initialises the CUDA runtime
// before the first filter (the runtime's initialisation makes sockets, which the filter refuses), calls the
// entry with a stream of its own and waits for the whole device context before it replies. The tensors
// stay in the worker's device memory: the worker hands over an IPC handle per call's allocation (COMMAND_OPEN)
// and writes each parameter struct with the pointers this process mapped.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef EVK_CUDA
#include <cuda_runtime.h>
#endif

#define MAX_CALLS 256  // protocol.MAX_BATCH
enum { COMMAND_CALL = 0, COMMAND_LOAD = 1, COMMAND_OPEN = 2, COMMAND_TOUCH = 3, COMMAND_NULL = 4, COMMAND_CLOSE = 5 };

// The first page of the arena; runner.py mirrors this layout (MAILBOX_FIELDS).
struct mailbox {
  volatile uint64_t request;  // sequence number of the request (the worker's)
  volatile uint64_t reply;    // sequence number of the last request served (this program's)
  uint64_t base;              // where this process mapped the arena
  uint32_t command;
  uint32_t count;             // calls in this request
  int32_t status;             // result of a load: 0, or 1 when the library or its entry is missing
  int32_t rc[MAX_CALLS];      // what each call returned
  uint64_t offsets[MAX_CALLS];  // arena offset of each call's parameter struct
  char path[512];             // the library to load
  char symbol[128];           // its entry point
  char error[256];            // why a load, an open or a call failed
  unsigned char handle[64];   // COMMAND_OPEN: a CUDA IPC handle of the worker's
  uint64_t opened;            // where this process mapped it (COMMAND_CLOSE: the mapping to close)
};

#ifdef EVK_CUDA
typedef int (*entry_fn)(const void *, cudaStream_t);
#define ENTRY(params) entry(params, stream)
#else
typedef int (*entry_fn)(const void *);
#define ENTRY(params) entry(params)
#endif

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "evk-runner: unsupported architecture for the seccomp filter"
#endif

#define MAX_FILTER 256
struct filter {
  struct sock_filter code[MAX_FILTER];
  unsigned short length;
};

static void emit(struct filter *f, struct sock_filter insn) {
  if (f->length >= MAX_FILTER) {
    fprintf(stderr, "evk-runner: seccomp filter too long\n");
    _exit(70);
  }
  f->code[f->length++] = insn;
}

#define DENY (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define LOW_ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i))  // little-endian: the low 32 bits

static void load_nr(struct filter *f) {
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
}

static void deny(struct filter *f, long nr) {
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
}

// `nr` with any of `bits` set in argument `arg` (all of them with `all`) is refused; other calls of `nr`
// are allowed. Ends with the call number reloaded for the rules after it.
static void deny_bits(struct filter *f, long nr, int arg, uint32_t bits, int all) {
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, all ? 5 : 4));
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  if (all) {
    emit(f, (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, bits));
    emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, bits, 0, 1));
  } else {
    emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, bits, 0, 1));
  }
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

// `nr` with argument `arg` equal to `value` is refused.
static void deny_value(struct filter *f, long nr, int arg, uint32_t value) {
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
  load_nr(f);
}

// `nr` is allowed only when argument `arg` equals `value` (signals to this process only).
static void only_when(struct filter *f, long nr, int arg, uint32_t value) {
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

static void install(struct filter *f, int loaded) {
  f->length = 0;
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  load_nr(f);
#if defined(__x86_64__)
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
#endif
  const long denied[] = {
    SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_kill, SYS_tkill, SYS_execve, SYS_execveat,
    SYS_socket, SYS_socketpair, SYS_connect, SYS_bind, SYS_listen, SYS_accept, SYS_accept4,
    SYS_unshare, SYS_setns, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_bpf, SYS_perf_event_open,
    SYS_userfaultfd, SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register, SYS_kexec_load,
    SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_add_key, SYS_keyctl, SYS_request_key,
    SYS_pidfd_open, SYS_pidfd_getfd, SYS_pidfd_send_signal, SYS_process_madvise, SYS_personality,
#ifdef SYS_fork
    SYS_fork,
#endif
#ifdef SYS_vfork
    SYS_vfork,
#endif
  };
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; ++i) deny(f, denied[i]);
  // clone3 hides its flags behind a pointer: refused as missing, so that threads fall back to clone
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  // clone: threads only (CLONE_THREAD set), never a new process
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
  emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(0)));
  emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY));
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  load_nr(f);
  only_when(f, SYS_tgkill, 0, (uint32_t)getpid());
  load_nr(f);
  deny_value(f, SYS_prctl, 0, PR_SET_PDEATHSIG);  // it dies with the worker,
  deny_value(f, SYS_prctl, 0, PR_SET_DUMPABLE);   // and stays closed to inspection
  if (loaded) {
    const long files[] = {SYS_openat, SYS_openat2, SYS_open_by_handle_at, SYS_memfd_create,
#ifdef SYS_open
                          SYS_open,
#endif
#ifdef SYS_creat
                          SYS_creat,
#endif
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) deny(f, files[i]);
    deny_bits(f, SYS_mmap, 2, PROT_EXEC, 0);
    load_nr(f);
    deny_bits(f, SYS_mprotect, 2, PROT_EXEC, 0);
    load_nr(f);
    deny_bits(f, SYS_pkey_mprotect, 2, PROT_EXEC, 0);
  } else {  // while the library loads: no memory both writable and executable
    deny_bits(f, SYS_mmap, 2, PROT_WRITE | PROT_EXEC, 1);
    load_nr(f);
    deny_bits(f, SYS_mprotect, 2, PROT_WRITE | PROT_EXEC, 1);
    load_nr(f);
    deny_bits(f, SYS_pkey_mprotect, 2, PROT_WRITE | PROT_EXEC, 1);
  }
  emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  struct sock_fprog program = {.len = f->length, .filter = f->code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) != 0) {
    perror("evk-runner: seccomp");
    _exit(71);
  }
}

#ifdef EVK_CUDA
// The stream-ordered allocator (cudaMallocAsync, which the contract allows) sets its pool up on first use;
// that happens here, before the filters, and the pool keeps what it has reserved, so that a kernel's workspace
// does not ask the driver for memory mappings under the filter at every call. A device without pools runs on: a
// kernel's own cudaMallocAsync then fails, and its rejection names the runtime's error.
static cudaError_t warm_pool(cudaStream_t stream) {
  cudaMemPool_t pool;
  void *block;
  uint64_t keep = UINT64_MAX;
  cudaError_t status = cudaDeviceGetDefaultMemPool(&pool, 0);
  if (status == cudaSuccess) status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (status == cudaSuccess) status = cudaMallocAsync(&block, 1 << 20, stream);
  if (status == cudaSuccess) status = cudaFreeAsync(block, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  return status;
}
#endif

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: evk-runner ARENA_FD ARENA_BYTES\n");
    return 64;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // never outlives the worker
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // no process of this user may read or write this one's memory
  const int fd = atoi(argv[1]);
  const size_t bytes = strtoull(argv[2], NULL, 10);
  char *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (arena == MAP_FAILED) {
    perror("evk-runner: mmap arena");
    return 72;
  }
  close(fd);
  struct mailbox *box = (struct mailbox *)arena;
  box->base = (uint64_t)(uintptr_t)arena;
#ifdef EVK_CUDA
  cudaStream_t stream;  // the device context first: before the filter, and before any kernel is loaded
  void *scratch;        // what an empty request's one small device operation writes
  cudaError_t ready = cudaSetDevice(0);
  if (ready == cudaSuccess) ready = cudaFree(0);
  if (ready == cudaSuccess) ready = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ready == cudaSuccess) ready = cudaMalloc(&scratch, 256);
  if (ready == cudaSuccess && warm_pool(stream) != cudaSuccess) cudaGetLastError();  // (no pool: kernels are told)
  if (ready != cudaSuccess) {
    fprintf(stderr, "evk-runner: CUDA: %s\n", cudaGetErrorString(ready));
    return 73;
  }
#endif
  cpu_set_t anywhere;  // the CPUs this process may use: the worker wakes it on its own, and it spreads again
  CPU_ZERO(&anywhere);
  sched_getaffinity(0, sizeof anywhere, &anywhere);
  struct filter filter;
  install(&filter, 0);
  entry_fn entry = NULL;
  uint64_t served = 0;
  raise(SIGSTOP);  // ready: the worker continues this process with each request
  for (;;) {  // (continued only with a request waiting: the loop does not spin)
    uint64_t request;
    while ((request = __atomic_load_n(&box->request, __ATOMIC_ACQUIRE)) == served) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    served = request;
    sched_setaffinity(0, sizeof anywhere, &anywhere);
    if (box->command == COMMAND_LOAD) {
      box->path[sizeof box->path - 1] = box->symbol[sizeof box->symbol - 1] = 0;
      void *library = dlopen(box->path, RTLD_NOW | RTLD_LOCAL);
      entry = library ? (entry_fn)dlsym(library, box->symbol) : NULL;
      box->status = entry ? 0 : 1;
      if (!entry) snprintf(box->error, sizeof box->error, "%s", library ? "entry point not found" : dlerror());
      install(&filter, 1);
    } else if (box->command == COMMAND_TOUCH) {  // map pages [offsets[0], offsets[1]) before a timed call needs them
      const long page = sysconf(_SC_PAGESIZE);
      for (uint64_t at = box->offsets[0]; at < box->offsets[1] && at < bytes; at += page) {
        volatile char *p = arena + at;
        *p = *p;
      }
#ifdef EVK_CUDA
    } else if (box->command == COMMAND_OPEN) {
      void *mapped = NULL;
      cudaIpcMemHandle_t handle;
      memcpy(&handle, box->handle, sizeof handle);
      const cudaError_t opened = cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
      box->opened = (uint64_t)(uintptr_t)mapped;
      box->status = opened;
      if (opened != cudaSuccess) snprintf(box->error, sizeof box->error, "%s", cudaGetErrorString(opened));
    } else if (box->command == COMMAND_CLOSE) {  // the worker is done with that allocation
      box->status = cudaIpcCloseMemHandle((void *)(uintptr_t)box->opened);
    } else if (box->command == COMMAND_NULL) {  // the round trip of a request with one small device operation
      cudaMemsetAsync(scratch, 0, 4, stream);
      box->status = cudaStreamSynchronize(stream);
#endif
    } else if (entry) {
      const uint32_t count = box->count < MAX_CALLS ? box->count : MAX_CALLS;
      for (uint32_t i = 0; i < count; ++i) {
        const uint64_t offset = box->offsets[i];
        box->rc[i] = offset < bytes ? ENTRY(arena + offset) : -1;
      }
#ifdef EVK_CUDA
      int failed = 0;
      for (uint32_t i = 0; i < count; ++i) failed |= box->rc[i] != 0;
      const cudaError_t refused = cudaGetLastError();  // what the runtime last refused the kernel, if anything
      const cudaError_t done = cudaDeviceSynchronize();  // every stream of this context, not only its own
      box->status = done;
      box->error[0] = 0;
      if (done != cudaSuccess) snprintf(box->error, sizeof box->error, "%s", cudaGetErrorString(done));
      else if (failed && refused != cudaSuccess)  // why a call returned non-zero, where the runtime knows
        snprintf(box->error, sizeof box->error, "%s: %s", cudaGetErrorName(refused), cudaGetErrorString(refused));
#endif
    }
    __atomic_store_n(&box->reply, served, __ATOMIC_RELEASE);
    raise(SIGSTOP);  // the reply: the worker waits for this process to stop
  }
}
