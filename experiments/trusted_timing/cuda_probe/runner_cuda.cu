// Probe prototype of a CUDA kernel runner (not the package's runner): the process that would load a
// candidate CUDA library, beside a trusted torch worker (probe.py) that owns the device buffers (exported
// with CUDA IPC) and the clock. Same protocol as evokernel/harness/runner.c: the worker writes a request into
// a shared memfd page while this process is stopped, continues it (SIGCONT), and stops its clock when
// waitpid(WUNTRACED) reports this process stopped again (it replies by raise(SIGSTOP)).
//
//   runner_cuda MAILBOX_FD MAILBOX_BYTES PREFILTER      PREFILTER: none | errno | trap | log
//
// PREFILTER installs runner.c's pre-load seccomp stage first thing (before CUDA is initialised). The
// post-load stage is installed on request (COMMAND_FILTER), with a choice of rule groups. "trap" mode
// denies with SECCOMP_RET_TRAP instead of SECCOMP_RET_ERRNO: a SIGSYS handler logs the call (number, an
// argument, a path for open/openat) in the mailbox and makes it fail with the same errno, so a run shows
// which refused calls the CUDA runtime makes. The BPF builders are runner.c's, with the deny action and the
// rule groups as parameters, and each rule selectable (mailbox only_rule / skip, read when a filter is
// built, the pre-load stage's too: the worker writes them before it starts this process). "log" mode
// allows what the rules would refuse and has the kernel log it (SECCOMP_RET_LOG, kernel log / audit).
//
// Build: nvcc -O2 -std=c++17 -cudart shared -o runner_cuda runner_cuda.cu -ldl
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
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
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_ARENAS 16
#define MAX_STEPS 16
#define MAX_DENIED 64
#define DENIED_PATH 48

enum {
  COMMAND_PING = 0,     // flags: F_SPIN, F_NULLK, F_GRAPH (the null graph), F_SYNC
  COMMAND_INIT = 1,     // cudaSetDevice, cudaFree(0), a non-blocking stream
  COMMAND_OPEN = 2,     // open handles [arena, arena2)
  COMMAND_LOAD = 3,     // dlopen(path), dlsym(symbol)
  COMMAND_CALL = 4,     // entry(&params[arena], stream) (F_GRAPH: replay arena's captured graph), F_SYNC
  COMMAND_CAPTURE = 5,  // capture arena's call (arena >= 0) and the null kernel into graphs
  COMMAND_FILTER = 6,   // install a seccomp stage: flags = groups | F_LOADED | F_TRAP
  COMMAND_POSTTEST = 7, // the list of CUDA operations below, each one's result in rc/err
};
enum { F_SYNC = 1, F_GRAPH = 2, F_NULLK = 4, F_SPIN = 8 };  // F_SPIN: a device spin of `extra` cycles first
enum { G_FILES = 1, G_MMAPX = 2, G_MPROTX = 4, F_LOADED = 0x100, F_TRAP = 0x200, F_LOG = 0x400 };

struct call_desc {  // the parameters of one arena's call (evk_attention_params without pointers)
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
  float scale;
  uint64_t off_q, off_k, off_v, off_o;  // byte offsets in the arena's allocation
};

typedef struct {  // evk_attention.h's evk_attention_params
  const void *q, *k, *v;
  void *o;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  int causal;
  float softmax_scale;
} evk_attention_params;

typedef int (*entry_fn)(const evk_attention_params *, cudaStream_t);

struct mailbox {  // probe.py's Mailbox mirrors this
  volatile uint64_t request;
  volatile uint64_t reply;
  uint32_t command;
  uint32_t flags;
  int32_t arena;
  int32_t arena2;
  int32_t extra;
  int32_t status;
  int32_t struct_size;  // sizeof(struct mailbox), written at start
  int32_t pad0;
  int32_t rc[MAX_STEPS];
  int32_t err[MAX_STEPS];
  double t_us[MAX_STEPS];  // this process's own clock: informational only
  uint32_t denied_count;
  uint32_t denied_nr[MAX_DENIED];
  uint32_t denied_total;  // every refused call, logged or not
  uint64_t denied_arg[MAX_DENIED];
  char denied_path[MAX_DENIED][DENIED_PATH];
  struct call_desc calls[MAX_ARENAS];
  unsigned char handles[MAX_ARENAS][64];
  char path[512];
  char symbol[128];
  char error[256];
  int32_t only_rule;          // >= 0: the filters hold this rule alone (rule ids below)
  unsigned char skip[128];    // skip[id] != 0: the filters leave rule `id` out
};

// Rule ids (for only_rule and skip): 0..39 the denied[] list in install(), then these.
enum { R_CLONE3 = 40, R_CLONE, R_TGKILL, R_PDEATHSIG, R_DUMPABLE, R_WX_MMAP, R_WX_MPROTECT, R_WX_PKEY, R_X32,
       R_COUNT };

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#else
#error "runner_cuda: x86-64 only (the SIGSYS handler reads x86-64 registers)"
#endif

#define MAX_FILTER 256
struct filter {
  struct sock_filter code[MAX_FILTER];
  unsigned short length;
};

static uint32_t deny_action = SECCOMP_RET_ERRNO;  // or SECCOMP_RET_TRAP (logged here), SECCOMP_RET_LOG (allowed,
                                                  // logged by the kernel)
static struct mailbox *box;

static int rule_on(int id) {
  return box->only_rule >= 0 ? id == box->only_rule : !(id < 128 && box->skip[id]);
}

static void emit(struct filter *f, struct sock_filter insn) {
  if (f->length >= MAX_FILTER) {
    fprintf(stderr, "runner_cuda: seccomp filter too long\n");
    _exit(70);
  }
  f->code[f->length++] = insn;
}

static struct sock_filter stmt(uint16_t code, uint32_t k) {
  struct sock_filter s = BPF_STMT(code, k);
  return s;
}
static struct sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  struct sock_filter s = BPF_JUMP(code, k, jt, jf);
  return s;
}

#define DENY_WITH(e) (deny_action | ((e) & SECCOMP_RET_DATA))
#define DENY DENY_WITH(EPERM)
#define LOW_ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i))

static void load_nr(struct filter *f) { emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))); }

static void deny(struct filter *f, long nr) {
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1));
  emit(f, stmt(BPF_RET | BPF_K, DENY));
}

static void deny_bits(struct filter *f, long nr, int arg, uint32_t bits, int all) {
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, all ? 5 : 4));
  emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  if (all) {
    emit(f, stmt(BPF_ALU | BPF_AND | BPF_K, bits));
    emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, bits, 0, 1));
  } else {
    emit(f, jump(BPF_JMP | BPF_JSET | BPF_K, bits, 0, 1));
  }
  emit(f, stmt(BPF_RET | BPF_K, DENY));
  emit(f, stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

static void deny_value(struct filter *f, long nr, int arg, uint32_t value) {
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
  emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
  emit(f, stmt(BPF_RET | BPF_K, DENY));
  load_nr(f);
}

static void only_when(struct filter *f, long nr, int arg, uint32_t value) {
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
  emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(arg)));
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0));
  emit(f, stmt(BPF_RET | BPF_K, DENY));
  emit(f, stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

// runner.c's install(), with `groups` choosing the loaded stage's rule groups (all three = runner.c's).
static int install(struct filter *f, int loaded, uint32_t groups) {
  f->length = 0;
  emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0));
  emit(f, stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  load_nr(f);
  if (rule_on(R_X32)) {
    emit(f, jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI
    emit(f, stmt(BPF_RET | BPF_K, DENY));
  }
  const long denied[] = {
    SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_kill, SYS_tkill, SYS_execve, SYS_execveat,
    SYS_socket, SYS_socketpair, SYS_connect, SYS_bind, SYS_listen, SYS_accept, SYS_accept4,
    SYS_unshare, SYS_setns, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_bpf, SYS_perf_event_open,
    SYS_userfaultfd, SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register, SYS_kexec_load,
    SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_add_key, SYS_keyctl, SYS_request_key,
    SYS_pidfd_open, SYS_pidfd_getfd, SYS_pidfd_send_signal, SYS_process_madvise, SYS_personality,
    SYS_fork, SYS_vfork,
  };
  static_assert(sizeof denied / sizeof denied[0] == R_CLONE3, "rule ids");
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; ++i)
    if (rule_on((int)i)) deny(f, denied[i]);
  if (rule_on(R_CLONE3)) {
    emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
    emit(f, stmt(BPF_RET | BPF_K, DENY_WITH(ENOSYS)));
  }
  if (rule_on(R_CLONE)) {
    emit(f, jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
    emit(f, stmt(BPF_LD | BPF_W | BPF_ABS, LOW_ARG(0)));
    emit(f, jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0));
    emit(f, stmt(BPF_RET | BPF_K, DENY));
    emit(f, stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    load_nr(f);
  }
  if (rule_on(R_TGKILL)) {
    only_when(f, SYS_tgkill, 0, (uint32_t)getpid());
    load_nr(f);
  }
  if (rule_on(R_PDEATHSIG)) deny_value(f, SYS_prctl, 0, PR_SET_PDEATHSIG);
  if (rule_on(R_DUMPABLE)) deny_value(f, SYS_prctl, 0, PR_SET_DUMPABLE);
  if (loaded) {
    if (groups & G_FILES) {
      const long files[] = {SYS_openat, SYS_openat2, SYS_open_by_handle_at, SYS_memfd_create, SYS_open, SYS_creat};
      for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) deny(f, files[i]);
    }
    if (groups & G_MMAPX) {
      deny_bits(f, SYS_mmap, 2, PROT_EXEC, 0);
      load_nr(f);
    }
    if (groups & G_MPROTX) {
      deny_bits(f, SYS_mprotect, 2, PROT_EXEC, 0);
      load_nr(f);
      deny_bits(f, SYS_pkey_mprotect, 2, PROT_EXEC, 0);
    }
  } else {
    if (rule_on(R_WX_MMAP)) {
      deny_bits(f, SYS_mmap, 2, PROT_WRITE | PROT_EXEC, 1);
      load_nr(f);
    }
    if (rule_on(R_WX_MPROTECT)) {
      deny_bits(f, SYS_mprotect, 2, PROT_WRITE | PROT_EXEC, 1);
      load_nr(f);
    }
    if (rule_on(R_WX_PKEY)) deny_bits(f, SYS_pkey_mprotect, 2, PROT_WRITE | PROT_EXEC, 1);
  }
  emit(f, stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  struct sock_fprog program = {f->length, f->code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) != 0) return errno ? errno : -1;
  return 0;
}

// ---------------------------------------------------------------------------------------------

static void on_sigsys(int sig, siginfo_t *info, void *context) {
  (void)sig;
  ucontext_t *uc = (ucontext_t *)context;
  const long nr = info->si_syscall;
  const greg_t *r = uc->uc_mcontext.gregs;
  const char *p = NULL;
  if (nr == SYS_openat || nr == SYS_openat2) p = (const char *)r[REG_RSI];
  if (nr == SYS_open || nr == SYS_creat) p = (const char *)r[REG_RDI];
  const uint64_t arg = (nr == SYS_mmap || nr == SYS_mprotect || nr == SYS_pkey_mprotect) ? (uint64_t)r[REG_RDX]
                                                                                        : (uint64_t)r[REG_RDI];
  char path[DENIED_PATH] = {0};
  for (int j = 0; p && j < DENIED_PATH - 1 && p[j]; ++j) path[j] = p[j];
  __atomic_fetch_add(&box->denied_total, 1, __ATOMIC_RELAXED);
  const uint32_t logged = __atomic_load_n(&box->denied_count, __ATOMIC_RELAXED);
  int seen = 0;  // one entry for each distinct (call, argument, path)
  for (uint32_t i = 0; i < logged && i < MAX_DENIED && !seen; ++i)
    seen = box->denied_nr[i] == (uint32_t)nr && box->denied_arg[i] == arg &&
           memcmp(box->denied_path[i], path, DENIED_PATH) == 0;
  if (!seen) {
    const uint32_t i = __atomic_fetch_add(&box->denied_count, 1, __ATOMIC_RELAXED);
    if (i < MAX_DENIED) {
      box->denied_nr[i] = (uint32_t)nr;
      box->denied_arg[i] = arg;
      memcpy(box->denied_path[i], path, DENIED_PATH);
    }
  }
  uc->uc_mcontext.gregs[REG_RAX] = -(long)(info->si_errno ? info->si_errno : EPERM);  // the errno the rule names
}

static int set_mode(uint32_t mode) {  // 0 errno, 1 trap, 2 log
  deny_action = mode == 1 ? SECCOMP_RET_TRAP : mode == 2 ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO;
  if (mode != 1) return 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSYS, &sa, NULL) == 0 ? 0 : errno;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__global__ void null_kernel(void) {}

// torch.cuda._sleep's kernel: queued before a call, it holds the device while the host launches the call
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

static cudaStream_t stream;
static entry_fn entry;
static void *bases[MAX_ARENAS];
static evk_attention_params params[MAX_ARENAS];
static cudaGraphExec_t graphs[MAX_ARENAS];
static cudaGraphExec_t null_graph;

static int open_arena(int i) {
  if (i < 0 || i >= MAX_ARENAS) return -1;
  cudaIpcMemHandle_t handle;
  memcpy(&handle, box->handles[i], sizeof handle);
  cudaError_t e = cudaIpcOpenMemHandle(&bases[i], handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) return (int)e;
  const struct call_desc *c = &box->calls[i];
  char *b = (char *)bases[i];
  params[i] = (evk_attention_params){b + c->off_q, b + c->off_k, b + c->off_v, b + c->off_o,
                                     c->batch, c->heads_q, c->heads_kv, c->seqlen_q, c->seqlen_k, c->head_dim,
                                     c->causal, c->scale};
  return 0;
}

static int capture(int a, cudaGraphExec_t *exec, int *rc) {
  cudaGraph_t graph;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) return (int)e;
  if (a >= 0) *rc = entry ? entry(&params[a], stream) : -1;
  else null_kernel<<<1, 1, 0, stream>>>();
  e = cudaStreamEndCapture(stream, &graph);
  if (e != cudaSuccess) return 1000 + (int)e;
  e = cudaGraphInstantiate(exec, graph, 0);
  cudaGraphDestroy(graph);
  return e == cudaSuccess ? 0 : 2000 + (int)e;
}

static void posttest(void) {
  const int a = box->arena, b = box->arena2, x = box->extra;
  double t;
  int s = 0;
  // 0: the warm kernel instance again
  t = now_us();
  box->rc[s] = entry ? entry(&params[a], stream) : -1;
  box->err[s] = (int)cudaStreamSynchronize(stream);
  box->t_us[s++] = now_us() - t;
  // 1: another arena's call (another head dim: a kernel instance not launched before)
  t = now_us();
  box->rc[s] = entry ? entry(&params[b], stream) : -1;
  box->err[s] = (int)cudaStreamSynchronize(stream);
  box->t_us[s++] = now_us() - t;
  // 2: this program's null kernel (its first launch if no ping launched it)
  t = now_us();
  null_kernel<<<1, 1, 0, stream>>>();
  box->rc[s] = (int)cudaGetLastError();
  box->err[s] = (int)cudaStreamSynchronize(stream);
  box->t_us[s++] = now_us() - t;
  // 3: capture the warm call into a graph, instantiate, replay
  t = now_us();
  cudaGraphExec_t exec = NULL;
  int rc = 0;
  box->err[s] = capture(a, &exec, &rc);
  box->rc[s] = rc;
  if (box->err[s] == 0) {
    box->err[s] = (int)cudaGraphLaunch(exec, stream);
    if (box->err[s] == 0) box->err[s] = (int)cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
  }
  box->t_us[s++] = now_us() - t;
  // 4: a new stream
  t = now_us();
  cudaStream_t other;
  box->err[s] = (int)cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  if (box->err[s] == 0) box->rc[s] = (int)cudaStreamDestroy(other);
  box->t_us[s++] = now_us() - t;
  // 5: device memory
  t = now_us();
  void *mem = NULL;
  box->err[s] = (int)cudaMalloc(&mem, 1 << 20);
  if (box->err[s] == 0) {
    box->rc[s] = (int)cudaMemsetAsync(mem, 0, 1 << 20, stream);
    cudaStreamSynchronize(stream);
    cudaFree(mem);
  }
  box->t_us[s++] = now_us() - t;
  // 6: an event
  t = now_us();
  cudaEvent_t ev;
  box->err[s] = (int)cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (box->err[s] == 0) {
    cudaEventRecord(ev, stream);
    box->rc[s] = (int)cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
  }
  box->t_us[s++] = now_us() - t;
  // 7: open another IPC handle now
  t = now_us();
  box->err[s] = x >= 0 ? open_arena(x) : -1;
  box->t_us[s++] = now_us() - t;
  // 8: the whole device
  t = now_us();
  box->err[s] = (int)cudaDeviceSynchronize();
  box->rc[s] = (int)cudaGetLastError();
  box->t_us[s++] = now_us() - t;
  box->status = s;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: runner_cuda MAILBOX_FD MAILBOX_BYTES none|errno|trap\n");
    return 64;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const int fd = atoi(argv[1]);
  const size_t bytes = strtoull(argv[2], NULL, 10);
  if (bytes < sizeof(struct mailbox)) {
    fprintf(stderr, "runner_cuda: mailbox of %zu bytes, %zu needed\n", bytes, sizeof(struct mailbox));
    return 65;
  }
  void *page = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    perror("runner_cuda: mmap");
    return 72;
  }
  close(fd);
  box = (struct mailbox *)page;
  box->struct_size = (int32_t)sizeof(struct mailbox);
  cpu_set_t anywhere;
  CPU_ZERO(&anywhere);
  sched_getaffinity(0, sizeof anywhere, &anywhere);
  struct filter filter;
  if (strcmp(argv[3], "none") != 0) {
    int e = set_mode(strcmp(argv[3], "trap") == 0 ? 1 : strcmp(argv[3], "log") == 0 ? 2 : 0);
    if (e == 0) e = install(&filter, 0, 0);
    box->status = e;  // read by the worker at the first stop
  }
  uint64_t served = 0;
  raise(SIGSTOP);
  for (;;) {
    uint64_t request;
    while ((request = __atomic_load_n(&box->request, __ATOMIC_ACQUIRE)) == served) __builtin_ia32_pause();
    served = request;
    sched_setaffinity(0, sizeof anywhere, &anywhere);
    const uint32_t flags = box->flags;
    const int a = box->arena;
    switch (box->command) {
      case COMMAND_PING:
        if (flags & F_SPIN) spin_kernel<<<1, 1, 0, stream>>>(box->extra);
        if (flags & F_NULLK) null_kernel<<<1, 1, 0, stream>>>();
        if (flags & F_GRAPH) cudaGraphLaunch(null_graph, stream);
        if (flags & F_SYNC) box->err[0] = (int)cudaStreamSynchronize(stream);
        break;
      case COMMAND_CALL:
        if (flags & F_SPIN) spin_kernel<<<1, 1, 0, stream>>>(box->extra);
        if (flags & F_GRAPH) box->err[1] = (int)cudaGraphLaunch(graphs[a], stream);
        else box->rc[0] = entry(&params[a], stream);
        if (flags & F_SYNC) box->err[0] = (int)cudaStreamSynchronize(stream);
        break;
      case COMMAND_INIT: {
        memset(box->err, 0, sizeof box->err);
        double t = now_us();
        box->err[0] = (int)cudaSetDevice(0);
        box->t_us[0] = now_us() - t;
        box->err[1] = (int)cudaFree(0);
        box->t_us[1] = now_us() - t;
        box->err[2] = (int)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        box->t_us[2] = now_us() - t;
        unsigned int dflags = 0;
        cudaGetDeviceFlags(&dflags);
        box->rc[0] = (int)dflags;
        break;
      }
      case COMMAND_OPEN:
        for (int i = a; i < box->arena2 && i < MAX_ARENAS; ++i) {
          double t = now_us();
          box->err[i - a] = open_arena(i);
          box->t_us[i - a] = now_us() - t;
        }
        break;
      case COMMAND_LOAD: {
        box->path[sizeof box->path - 1] = box->symbol[sizeof box->symbol - 1] = 0;
        double t = now_us();
        void *library = dlopen(box->path, RTLD_NOW | RTLD_LOCAL);
        entry = library ? (entry_fn)dlsym(library, box->symbol) : NULL;
        box->t_us[0] = now_us() - t;
        box->status = entry ? 0 : 1;
        if (!entry) snprintf(box->error, sizeof box->error, "%s", library ? "entry point not found" : dlerror());
        break;
      }
      case COMMAND_CAPTURE: {
        int rc = 0;
        box->err[0] = a >= 0 ? capture(a, &graphs[a], &rc) : 0;
        box->rc[0] = rc;
        box->err[1] = null_graph ? 0 : capture(-1, &null_graph, &rc);
        break;
      }
      case COMMAND_FILTER: {
        int e = set_mode((flags & F_TRAP) ? 1 : (flags & F_LOG) ? 2 : 0);
        box->status = e ? e : install(&filter, (flags & F_LOADED) != 0, flags & 0xff);
        break;
      }
      case COMMAND_POSTTEST:
        memset(box->rc, 0, sizeof box->rc);
        memset(box->err, 0, sizeof box->err);
        posttest();
        break;
      default:
        box->status = -2;
    }
    __atomic_store_n(&box->reply, served, __ATOMIC_RELEASE);
    raise(SIGSTOP);
  }
}
