"""Trusted timing on the CPU path and (on a GPU machine) the CUDA path: kernels that take over the process that
loads them (the runner) cannot raise a figure. Each attack is planted with the static guard bypassed (as if a kernel had slipped past the
source and import checks), so what is tested is the runner's isolation, the worker's clock and buffers and
the seccomp filter; each must be rejected or gain nothing. The default check with the guard in place is
tested too where the guard already refuses the attack."""

from __future__ import annotations

import pytest

from evokernel.harness import CheckOptions, check_source, get_task
from evokernel.harness import guard, object_imports
from planted import CPU, CUDA

QUICK = CheckOptions(scenario_set="quick", rounds=5)
GAINS_NOTHING = 1.25  # a check of the original against itself varies by a few percent; a cheat gains 2-3x

# What every attack needs to find the runner's mailbox: it sits at the start of the shared arena, which holds
# the parameter struct, and records its own address (runner.c's `struct mailbox`).
MAILBOX = r"""
#include <stdint.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <pthread.h>
struct evk_box { volatile uint64_t request, reply, base; uint32_t command, count; int32_t status; };
static struct evk_box* find_box(const void* p) {
  for (uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095; page; page -= 4096) {
    struct evk_box* box = (struct evk_box*)page;
    if (box->base == page) return box;
  }
  return 0;
}
static void reply_now(struct evk_box* box) {  // a reply written early, and bytes on every descriptor
  box->reply = box->request;
  const char byte = 1;
  for (int fd = 3; fd < 64; ++fd) syscall(SYS_write, fd, &byte, 1);
}
"""


# The entry's definition, the honest call and C linkage, per path (the CUDA entry also takes the harness's
# stream, and its source is C++).
PATHS = {
    "cpu": ("attention-fwd-cpu", CPU, "#define EVK_ENTRY int evk_attention_fwd(const evk_attention_params* p)\n"
            "#define HONEST(params) honest_fwd(params)\n#define EVK_EXTERN extern\n"),
    "cuda": ("attention-fwd", CUDA, "static cudaStream_t evk_stream;\nstatic int evk_body(const evk_attention_params* p);\n"
             "extern \"C\" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {\n"
             "  evk_stream = stream;\n  return evk_body(p);\n}\n"
             "#define EVK_ENTRY static int evk_body(const evk_attention_params* p)\n"
             "#define HONEST(params) honest_fwd(params, evk_stream)\n#define EVK_EXTERN extern \"C\"\n"),
}


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def path(request):
    """The task, the entry's wrapper and the entry's macros of one path."""
    return PATHS[request.param]


@pytest.fixture
def unguarded(monkeypatch):
    """The source and import checks switched off: only the runner, the worker and seccomp stand."""
    monkeypatch.setattr(guard, "check_source", lambda *args: None)
    monkeypatch.setattr(object_imports, "check_shared_object", lambda *args: None)


def check_attack(path, wrapper: str, mailbox: bool = True):
    """Check the task's original wrapped in `wrapper` (after the mailbox finder, unless told otherwise: its
    headers are more than the static guard allows)."""
    task, entry, macros = path
    source = entry.wrap((MAILBOX if mailbox else "") + macros + wrapper)(get_task(task).original.read_text())
    return check_source(source, get_task(task), QUICK)


def rejected_or_gains_nothing(report) -> None:
    if report.correct:
        assert report.geomean_speedup < GAINS_NOTHING, f"gained {report.geomean_speedup:.2f}x"
    else:
        assert report.geomean_speedup is None


# The attack measured against the in-process worker (3.06x): three functions of the Python C API, declared
# without a header, take the interpreter lock on the first call and patch the worker's channel so that every
# timed call of the candidate reports a third of its time.
C_API_REWRITE = r"""
EVK_EXTERN int PyGILState_Ensure(void) __attribute__((weak));
EVK_EXTERN void PyGILState_Release(int) __attribute__((weak));
EVK_EXTERN int PyRun_SimpleString(const char*) __attribute__((weak));
static int patched;
EVK_ENTRY {
  if (!patched && PyRun_SimpleString) {
    patched = 1;
    int state = PyGILState_Ensure();
    PyRun_SimpleString(
      "import evokernel.harness.worker as w\n"
      "send = w.Channel.send\n"
      "def forged(self, kind, **data):\n"
      "    if kind == 'call' and data.get('kernel') == 'candidate': data['ms'] /= 3\n"
      "    send(self, kind, **data)\n"
      "w.Channel.send = forged\n");
    PyGILState_Release(state);
  }
  return HONEST(p);
}
"""


def test_the_c_api_rewrite_is_refused_by_the_import_allowlist(path):
    report = check_attack(path, C_API_REWRITE, mailbox=False)
    assert not report.correct and "PyGILState_Ensure" in report.failure and "allowlist" in report.failure


def test_the_c_api_rewrite_finds_no_interpreter_in_the_runner(path, unguarded):
    report = check_attack(path, C_API_REWRITE, mailbox=False)
    assert report.correct, report.failure  # the weak symbols resolve to nothing: it runs honestly
    rejected_or_gains_nothing(report)


def test_a_reply_before_the_work_is_done_gains_nothing(path, unguarded):
    """The kernel writes the reply, then computes: the worker's clock runs until the runner has stopped."""
    report = check_attack(path, r"""
EVK_ENTRY {
  struct evk_box* box = find_box(p);
  if (box) reply_now(box);
  return HONEST(p);
}
""")
    rejected_or_gains_nothing(report)


def test_a_runner_that_stops_before_its_work_is_done_is_caught(path, unguarded):
    """The kernel writes the reply and stops its process, to finish the work once it is continued: its
    outputs are read while it is stopped, unfinished."""
    report = check_attack(path, r"""
#include <signal.h>
EVK_ENTRY {
  struct evk_box* box = find_box(p);
  if (box) {
    box->reply = box->request;
    syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), SIGSTOP);
  }
  return HONEST(p);
}
""")
    assert not report.correct and any(word in report.failure for word in ("NaN", "unwritten", "poisoned")), \
        report.failure


def test_a_forged_reply_ends_no_wait(path, unguarded):
    """Bytes on every descriptor and a wrong sequence number in the arena, before and after the work: the wait
    ends only at the runner's own reply, and a reply that does not match the request is refused."""
    report = check_attack(path, r"""
EVK_ENTRY {
  struct evk_box* box = find_box(p);
  const char byte = 1;
  for (int fd = 3; fd < 64; ++fd) syscall(SYS_write, fd, &byte, 1);
  if (box) box->reply = box->request + 7;
  return HONEST(p);
}
""")
    rejected_or_gains_nothing(report)


def test_forged_messages_never_reach_the_harness_channel(path, unguarded):
    """JSON lines that would claim a 100x speedup, written to every descriptor the runner could hold: the
    harness channel is not among them."""
    report = check_attack(path, r"""
#include <string.h>
EVK_ENTRY {
  static const char line[] = "{\"type\": \"call\", \"index\": 0, \"call\": 1000000, \"kernel\": \"candidate\", "
                             "\"ms\": 0.000001, \"offsets\": [0, 0, 0], \"batch\": 1}\n";
  for (int fd = 1; fd < 64; ++fd) syscall(SYS_write, fd, line, strlen(line));
  return HONEST(p);
}
""")
    if path is PATHS["cpu"]:  # (a CUDA runner's descriptors include the driver's: the lines may break its context)
        assert report.correct, report.failure
    rejected_or_gains_nothing(report)


def test_an_output_written_after_the_reply_is_caught(path, unguarded):
    """The work is left to a thread that finishes after the call returned: the runner is stopped at its
    reply, so the thread never writes in time."""
    report = check_attack(path, r"""
static void* later(void* p) { HONEST((const evk_attention_params*)p); return 0; }
EVK_ENTRY {
  pthread_t thread;
  return pthread_create(&thread, 0, later, (void*)p);
}
""")
    if path is PATHS["cpu"]:
        assert not report.correct and ("NaN" in report.failure or "unwritten" in report.failure), report.failure
    else:  # the thread may launch the work before the runner waits for its device context: then it is timed
        rejected_or_gains_nothing(report)


def test_the_runner_cannot_reach_the_worker_or_other_processes(path, unguarded):
    """Debugging, reading or writing another process's memory, new processes, sockets, executable memory and
    files: every attempt fails (the kernel returns an error if one succeeds), so the check passes."""
    report = check_attack(path, r"""
#include <sys/mman.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
EVK_ENTRY {
  const long parent = syscall(SYS_getppid);
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/mem", parent);
  if (syscall(SYS_openat, -100 /* AT_FDCWD */, path, O_RDWR) >= 0) return 11;
  if (syscall(SYS_openat, -100 /* AT_FDCWD */, "/proc/self/mem", O_RDWR) >= 0) return 12;
  if (syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, parent, 0, 0) == 0) return 13;
  char byte; struct iovec local = {&byte, 1}, remote = {(void*)4096, 1};
  if (syscall(SYS_process_vm_writev, parent, &local, 1, &remote, 1, 0) >= 0) return 14;
  if (syscall(SYS_socket, 2, 1, 0) >= 0) return 15;
  if (syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) >= 0) return 16;  // a new process (fork)
  void* code = (void*)syscall(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | 0x20 /* MAP_ANONYMOUS */, -1, 0);
  if (code != MAP_FAILED && (long)code > 0) return 17;
  if (syscall(SYS_kill, parent, 9) == 0) return 18;
  return HONEST(p);
}
""")
    assert report.correct, report.failure
