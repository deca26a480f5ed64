"""The static guard: one-line reasons naming the line, linear time, and the import check on built objects
(C objects built here with gcc; CUDA objects go through the same check)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from evokernel.builtin_tasks import ATTENTION_SEEDS
from evokernel.harness import guard, object_imports
from evokernel.harness.languages import LANGUAGES
from evokernel.harness.task_loader import get_task

CPU_TASK = get_task("attention-fwd-cpu")
GPU_TASK = get_task("attention-fwd")
C_ORIGINAL = CPU_TASK.original.read_text()
CU_ORIGINAL = GPU_TASK.original.read_text()
C_LINES = C_ORIGINAL.count("\n")  # the original ends with a newline: appended text starts on C_LINES + 1
CU_LINES = CU_ORIGINAL.count("\n")
DEFAULTS = sorted(ATTENTION_SEEDS.glob("*.cu"))  # the hand-written seeds


def c_check(source: str) -> str | None:
    return guard.check_source(source, "c", CPU_TASK.header_file, CPU_TASK.entry)


def cu_check(source: str) -> str | None:
    return guard.check_source(source, "cuda", GPU_TASK.header_file, GPU_TASK.entry)


# --- what must pass ---

@pytest.mark.parametrize("path", [CPU_TASK.original, GPU_TASK.original, *DEFAULTS], ids=lambda p: p.name)
def test_originals_and_defaults_pass(path):
    language = "c" if path.suffix == ".c" else "cuda"
    task = CPU_TASK if language == "c" else GPU_TASK
    assert guard.check_source(path.read_text(), language, task.header_file, task.entry) is None


def test_defaults_hold_inline_ptx_that_stays_allowed():
    assert DEFAULTS and any('asm volatile("mma.sync' in p.read_text().replace("(\n      ", "(") for p in DEFAULTS)


@pytest.mark.parametrize("statement", [
    'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1}, {%2}, {%3}, {%0,%1};\\n"'
    ' : "+f"(c0), "+f"(c1) : "r"(a), "r"(b));',
    'asm("ld.global.nc.f32 %0, [%1];" : "=f"(y) : "l"(p));',
    '__asm__ __volatile__("pause");',
    'asm("nop");',
    'if (n) asm("nop");',
    'while (n--) __asm__("pause");',
    'for (;;) { asm("trap;"); }',
    'if (n) [[likely]] asm("nop");',
])
def test_inline_asm_statements_are_allowed(statement):
    source = CU_ORIGINAL + f"__device__ void extra(float c0, float c1, int a, int b, const float* p, int n) {{\n  float y;\n  {statement}\n}}\n"
    assert cu_check(source) is None


@pytest.mark.parametrize("pragma", ["once", "unroll", "unroll 4", "unroll(8)", "nounroll", "omp parallel for simd",
                                    "GCC ivdep", "GCC unroll 4", "nv_diag_suppress 177", "diag_suppress 550"])
def test_allowed_pragmas_pass(pragma):
    assert c_check(C_ORIGINAL + f"#pragma {pragma}\n") is None


def test_asm_in_a_macro_body_is_not_a_label():
    assert c_check(C_ORIGINAL + '#define SPIN() asm("pause")\n#define NOP asm("nop")\n') is None


def test_forbidden_words_in_comments_and_strings_are_ignored():
    source = C_ORIGINAL + '// system("x"); dlopen\n/* fopen(\n getenv */\nstatic const char* s = "popen(";\n'
    assert c_check(source) is None


# --- size and time ---

def test_a_kernel_over_the_size_limit_is_refused_at_once():
    start = time.perf_counter()
    reason = c_check("// x\n" * (10 * 1024 * 1024))
    assert reason == "static guard: the kernel is 50.0 MB; the limit is 512 KB"
    assert time.perf_counter() - start < 1.0
    assert c_check(C_ORIGINAL + " " * (guard.MAX_SOURCE_BYTES - len(C_ORIGINAL))) is None
    assert c_check(C_ORIGINAL + " " * (guard.MAX_SOURCE_BYTES + 1 - len(C_ORIGINAL))) == \
        "static guard: the kernel is 512.0 KB; the limit is 512 KB"


@pytest.mark.parametrize("filler", ["\n", " \t\n", "// a comment line\n", "/* a block comment */\n", "\n\n#\n"],
                         ids=["blank", "blank-with-spaces", "line-comments", "block-comments", "null-directives"])
def test_scan_is_linear_in_the_source_size(monkeypatch, filler):
    """Complexity, not speed: `^\\s*` spanning blank lines made the old scan quadratic (minutes for this)."""
    monkeypatch.setattr(guard, "MAX_SOURCE_BYTES", 64 * 1024 * 1024)
    source = filler * (5 * 1024 * 1024 // len(filler)) + 'void g(void) { system("x"); }\n'
    start = time.perf_counter()
    reason = c_check(source)
    assert time.perf_counter() - start < 2.0
    assert reason == f"static guard: starts processes or makes system calls ('system' at line {source.count(chr(10))})"


@pytest.mark.parametrize("unit", ['"\\"', "'\\'", "/*/", "(", ") asm (", "x asm(", "1'", 'R"(', "\\\n", "??", "_"])
def test_adversarial_sources_at_the_size_limit_are_quick(unit):
    source = unit * (guard.MAX_SOURCE_BYTES // len(unit))
    for language in ("c", "cuda"):
        start = time.perf_counter()
        guard.check_source(source, language, "evk_attention.h", "evk_attention_fwd")
        assert time.perf_counter() - start < 2.0, (unit, language)


# --- includes, directives and pragmas ---

def test_include_not_on_the_list_names_the_line():
    assert c_check(C_ORIGINAL + "#include <stdio.h>\n") == \
        f"static guard: #include <stdio.h> is not allowed at line {C_LINES + 1} (only the ABI header and standard headers)"


def test_include_through_a_macro_is_refused():
    source = "#define H <stdio.h>\n#include H\n" + C_ORIGINAL
    assert c_check(source) == ("static guard: includes a computed name ('#include H' at line 2); "
                               "only <name> or \"name\" is allowed")
    assert "includes a computed name ('#include STR(math.h)' at line 1)" in c_check("#include STR(math.h)\n" + C_ORIGINAL)


@pytest.mark.parametrize("directive,name", [("#include_next <math.h>", "include_next"), ("#import <math.h>", "import"),
                                            ('#embed "/etc/passwd"', "embed"), ("#ident \"x\"", "ident"),
                                            ("# 1 \"other.c\"", "1")])
def test_directives_off_the_list_are_refused(directive, name):
    assert c_check(C_ORIGINAL + "int pad;\n" + directive + "\n") == \
        f"static guard: the directive #{name} is not allowed (line {C_LINES + 2})"


@pytest.mark.parametrize("written", ["%:include <stdio.h>", "#/* a\n comment */include <stdio.h>", "#inc\\\nlude <stdio.h>",
                                     "  #  include <stdio.h>", "#include\t<stdio.h>"])
def test_disguised_include_directives_are_seen(written):
    assert c_check("int pad;\n" + written + "\n" + C_ORIGINAL).startswith(
        "static guard: #include <stdio.h> is not allowed at line 2 ")


@pytest.mark.parametrize("probe", ["__has_include", "__has_include_next", "__has_embed"])
def test_header_probes_are_refused(probe):
    assert c_check(C_ORIGINAL + f"#if {probe}(<stdio.h>)\n#endif\n") == \
        f"static guard: {probe} is not allowed (line {C_LINES + 1})"


def test_pragma_off_the_list_is_refused_with_its_text():
    assert c_check(C_ORIGINAL + '#pragma comment(lib, "dl")\n') == \
        f'static guard: #pragma comment(lib, "dl") is not allowed (line {C_LINES + 1})'
    assert c_check(C_ORIGINAL + "\n\n#pragma GCC dependency \"/etc/passwd\"\n") == \
        f'static guard: #pragma GCC dependency "/etc/passwd" is not allowed (line {C_LINES + 3})'
    assert c_check(C_ORIGINAL + "#pragma push_macro(\"X\")\n").startswith('static guard: #pragma push_macro("X")')


def test_pragma_operator_is_refused():
    assert c_check(C_ORIGINAL + '_Pragma("GCC dependency \\"x\\"")\n') == \
        f"static guard: _Pragma is not allowed (line {C_LINES + 1})"


def test_trigraphs_are_refused():
    assert c_check("??=include <stdio.h>\n" + C_ORIGINAL) == "static guard: uses a trigraph ('??=' at line 1)"


# --- assembler reading files ---

@pytest.mark.parametrize("asm,directive", [
    ('__asm__(".incbin \\"/etc/passwd\\"");', "incbin"),
    ('__asm__(".section .rodata\\n.include \\"secrets.s\\"");', "include"),
    ('__asm__(".inc" "bin \\"/etc/passwd\\"");', "incbin"),  # adjacent literals
    ('__asm__(".inc\\x62in \\"/etc/passwd\\"");', "incbin"),  # an escape
    ('__asm__(".INCBIN \\"/etc/passwd\\"");', "incbin"),
    ('#define S(x) #x\n__asm__(S(.incbin "/etc/passwd"));', "incbin"),  # stringified
])
def test_asm_that_reads_a_file_is_refused(asm, directive):
    line = C_LINES + asm.count("\n") + 1
    assert c_check(C_ORIGINAL + asm + "\n") == \
        f"static guard: asm reads a file at build time (.{directive}) at line {line}"


def test_asm_file_read_in_cuda_is_refused():
    assert cu_check(CU_ORIGINAL + '\n__asm__(".incbin \\"/etc/passwd\\"");\n') == \
        f"static guard: asm reads a file at build time (.incbin) at line {CU_LINES + 2}"


# --- renamed symbols ---

@pytest.mark.parametrize("declaration,name", [
    ('int my_open(const char*, int) __asm__("open64");', "open64"),
    ('int my_open(const char*, int) asm("__open64");', "__open64"),
    ('int my_open(const char*, int)\n    __asm ( "open64" );', "open64"),
    ('int my_open(const char*, int) __attribute__((nothrow)) __asm__("open64");', "open64"),
    ('int my_open(const char*, int) __asm__("" "open64");', "open64"),
    ('int my_open(const char*, int) __asm__("*open64");', "open64"),
    ('extern char** env __asm__("environ");', "environ"),
    ('extern char* env[] __asm__("environ");', "environ"),
    ('int a asm("x"), my_exec(const char*, char* const*) asm("execv");', "x"),
])
def test_asm_labels_are_refused(declaration, name):
    line = C_LINES + 1 + declaration[:declaration.index("asm")].count("\n")  # the line of the label
    assert c_check(C_ORIGINAL + declaration + "\n") == \
        f"static guard: renames a symbol with an asm label ('{name}' at line {line})"


@pytest.mark.parametrize("declaration,name", [
    ('extern "C" int my_open(const char*, int) noexcept asm("open64");', "open64"),
    ('[[gnu::used]] int my_open(const char*, int) asm("open64");', "open64"),
    ('int my_open(const char*, int) throw() __asm__("open64");', "open64"),
])
def test_asm_labels_in_cuda_are_refused(declaration, name):
    assert cu_check(CU_ORIGINAL + declaration + "\n") == \
        f"static guard: renames a symbol with an asm label ('{name}' at line {CU_LINES + 1})"


@pytest.mark.parametrize("attribute", ['weakref("open64")', 'alias("open64")', '__symver__("open@GLIBC_2.2.5")'])
def test_renaming_attributes_are_refused(attribute):
    word = attribute.split("(")[0].strip("_")
    assert c_check(C_ORIGINAL + f"static int o(const char*, int) __attribute__(({attribute}));\n") == \
        f"static guard: renames a symbol with an attribute ('{word}' at line {C_LINES + 1})"


# --- forbidden calls by name, where the compiler sees them ---

def test_forbidden_call_names_its_line_after_multiline_comments_and_splices():
    source = "/* one\n two\n three */\n" + C_ORIGINAL + "void g(void) {\n  sys\\\ntem(\"x\");\n}\n"
    assert c_check(source) == f"static guard: starts processes or makes system calls ('system' at line {C_LINES + 5})"


def test_raw_string_does_not_hide_code():
    source = CU_ORIGINAL + 'const char* s = R"x(")x"; void h() { system("y"); } //")";\n'
    assert cu_check(source) == f"static guard: starts processes or makes system calls ('system' at line {CU_LINES + 1})"
    assert cu_check(CU_ORIGINAL + 'const char* s = R"x(system("y"))x";\n') is None


def test_digit_separators_do_not_hide_code():
    source = CU_ORIGINAL + "int y = 1'0; void h() { system(\"a\"); } int z = 0'0;\n"
    assert cu_check(source) == f"static guard: starts processes or makes system calls ('system' at line {CU_LINES + 1})"


def test_missing_entry_point():
    assert c_check("int f(void) { return 0; }\n") == "static guard: the entry point evk_attention_fwd is not defined"


# --- imports of built objects ---

FORBIDDEN_IMPORTS = [
    "open", "open64", "__open64", "__open_2", "__open64_2", "openat", "openat64", "__openat64_2", "creat", "creat64",
    "fopen", "fopen64", "_IO_fopen", "freopen", "freopen64", "execv", "execve", "execvpe", "execl", "fexecve",
    "posix_spawn", "posix_spawnp", "fork", "vfork", "clone", "__clone", "system", "__libc_system", "popen", "dlopen",
    "dlsym", "dlmopen", "dlvsym", "__libc_dlopen_mode", "socket", "connect", "bind", "listen", "accept", "accept4",
    "send", "sendto", "sendmsg", "recv", "recvfrom", "__recv_chk", "getenv", "secure_getenv", "__secure_getenv",
    "setenv", "putenv", "environ", "__environ", "pthread_create", "thrd_create", "syscall", "mmap", "mmap64",
    "mprotect", "ptrace", "kill", "unlink", "unlinkat", "rename", "remove", "process_vm_readv", "process_vm_writev",
    "memfd_create", "shm_open", "prctl", "chdir", "open64@GLIBC_2.2.5",
    "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE",
    "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaDeviceSynchronize", "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz", "cudaDeviceReset", "cudaMallocManaged", "cudaHostAlloc", "cudaMallocHost",
    "cudaSetDevice", "cudaDeviceSetLimit", "cudaDeviceSynchronize@libcudart.so.13",
]
ALLOWED_IMPORTS = [
    "expf", "exp", "logf", "sqrtf", "fmaxf", "memcpy", "memset", "memmove", "__memcpy_chk", "malloc", "free", "calloc",
    "realloc", "posix_memalign", "printf", "fprintf", "snprintf", "__printf_chk", "puts", "stderr", "abort",
    "omp_get_num_threads", "omp_get_thread_num", "GOMP_parallel", "GOMP_barrier", "__cxa_atexit", "__cxa_finalize",
    "__cxa_guard_acquire", "__gxx_personality_v0", "_Unwind_Resume", "__stack_chk_fail", "__gmon_start__",
    "_ITM_registerTMCloneTable", "_Znwm", "_ZdlPvm", "_Znam", "_ZdaPv", "cudaLaunchKernel", "cudaMalloc", "cudaFree",
    "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGetLastError", "cudaFuncSetAttribute", "cudaGetDevice",
    "cudaGetDeviceProperties", "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaStreamGetPriority",
    "__cudaRegisterFatBinary", "__cudaRegisterFunction", "__cudaLaunchKernel", "__cudaPushCallConfiguration",
    "__nv_cudaEntityRegisterCallback", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
    "cuGetProcAddress", "__cudaGetKernel@libcudart.so.13", "expf@GLIBC_2.27",
]


@pytest.mark.parametrize("symbol", FORBIDDEN_IMPORTS)
def test_forbidden_imports(symbol):
    assert object_imports.forbidden_import(symbol)


@pytest.mark.parametrize("symbol", ALLOWED_IMPORTS)
def test_allowed_imports(symbol):
    assert not object_imports.forbidden_import(symbol)


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None, reason="needs gcc and nm")


def build_c(tmp_path: Path, source: str) -> Path:
    """Build a C shared object directly (no source guard), as a candidate that slipped past it would be."""
    (tmp_path / "k.c").write_text(source)
    library = tmp_path / "k.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "k.c"), "-lm"],
                   check=True, capture_output=True, text=True)
    return library


@needs_gcc
def test_object_importing_open64_through_an_asm_label_is_refused(tmp_path):
    library = build_c(tmp_path, 'int o(const char*, int) __asm__("open64");\n'
                                'int evk_attention_fwd(const void* p) { return o("/etc/passwd", 0); }\n')
    assert c_check(library.with_suffix(".c").read_text()).startswith("static guard: renames a symbol with an asm label")
    assert object_imports.check_shared_object(library) == "static guard: the built object imports 'open64'"


@needs_gcc
@pytest.mark.parametrize("name,declaration,call", [
    ("__openat64_2", "int o(int, const char*, int)", 'o(-100, "/etc/passwd", 0)'),
    ("execvpe", "int o(const char*, char* const*, char* const*)", 'o("sh", 0, 0)'),
    ("dlsym", "void* o(void*, const char*)", '(int)(long)o(0, "system")'),
])
def test_object_importing_a_forbidden_variant_is_refused(tmp_path, name, declaration, call):
    library = build_c(tmp_path, f'{declaration} __asm__("{name}");\n'
                                f"int evk_attention_fwd(const void* p) {{ return {call}; }}\n")
    assert object_imports.check_shared_object(library) == f"static guard: the built object imports '{name}'"


@needs_gcc
def test_object_with_math_and_memory_imports_passes(tmp_path):
    library = build_c(tmp_path, """
#include <math.h>
#include <stdlib.h>
#include <string.h>
int evk_attention_fwd(float* o, const float* x, int n) {
  float* t = malloc(n * sizeof(float));
  if (!t) return 1;
  for (int i = 0; i < n; ++i) t[i] = expf(x[i]);
  memcpy(o, t, n * sizeof(float));
  free(t);
  return 0;
}
""")
    listing = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True).stdout
    assert "expf" in listing and "malloc" in listing and "memcpy" in listing
    assert object_imports.check_shared_object(library) is None


@needs_gcc
def test_task_original_object_passes(tmp_path):
    library = tmp_path / "original.so"
    command = LANGUAGES["c"].compile_command(CPU_TASK.original, CPU_TASK.header.parent, library)
    subprocess.run(command, check=True, capture_output=True, text=True)
    assert object_imports.check_shared_object(library) is None


def test_without_nm_the_object_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert object_imports.check_shared_object(tmp_path / "k.so") == \
        "static guard: nm is not available to check the built object's imports"


@needs_gcc
def test_an_object_nm_cannot_read_is_refused(tmp_path):
    (tmp_path / "k.so").write_text("not an object")
    assert object_imports.check_shared_object(tmp_path / "k.so").startswith(
        "static guard: nm could not read the built object's imports")


# --- CUDA objects link the shared runtime so that their own imports show ---

def test_cuda_command_links_the_shared_runtime_with_an_rpath(tmp_path, monkeypatch):
    root = tmp_path / "cuda-13.0"
    (root / "bin").mkdir(parents=True)
    (root / "lib64").mkdir()
    machine = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}.get(platform.machine(), platform.machine() + "-linux")
    (root / "targets" / machine / "lib").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 0\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(root / "bin"))
    command = LANGUAGES["cuda"].compile_command(Path("k.cu"), Path("include"), Path("k.so"))
    joined = " ".join(command)
    assert "-cudart shared" in joined
    assert f"-Xlinker -rpath={root.resolve() / 'lib64'}" in joined
    assert f"-Xlinker -rpath={root.resolve() / 'targets' / machine / 'lib'}" in joined
    assert command[0] == "nvcc" and command[-1] == "k.cu"


def test_cuda_command_without_nvcc_still_names_the_shared_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    command = LANGUAGES["cuda"].compile_command(Path("k.cu"), Path("include"), Path("k.so"))
    assert "-cudart" in command and command[command.index("-cudart") + 1] == "shared"
    assert not any(arg.startswith("-rpath") for arg in command)


# --- allowlists: what a built object may import, by language ---

# The imports of 108 CUDA kernels built on the H200 (the tree's and two search runs';
# experiments/trusted_timing/cuda_imports.py): every one must stay allowed.
MEASURED_CUDA_IMPORTS = """_ITM_deregisterTMCloneTable _ITM_registerTMCloneTable _Unwind_Resume __cudaGetKernel __cudaLaunchKernel
__cudaPopCallConfiguration __cudaPushCallConfiguration __cudaRegisterFatBinary __cudaRegisterFatBinaryEnd
__cudaRegisterFunction __cudaRegisterVar __cudaUnregisterFatBinary __cxa_atexit __cxa_finalize __cxa_guard_abort
__cxa_guard_acquire __cxa_guard_release __gmon_start__ __gxx_personality_v0 __stack_chk_fail cudaDeviceGetAttribute
cudaFreeAsync cudaFuncSetAttribute cudaGetDevice cudaGetDriverEntryPointByVersion cudaGetLastError
cudaMallocAsync
cudaMemGetInfo""".split()  # (and the free-memory query a planted isolation kernel makes)
MEASURED_C_IMPORTS = ["GOMP_parallel", "GOMP_loop_nonmonotonic_dynamic_start", "omp_get_thread_num", "expf@GLIBC_2.27",
                      "sqrtf", "memset", "memcpy", "malloc", "free", "__cxa_finalize", "_ITM_registerTMCloneTable"]


@pytest.mark.parametrize("symbol", MEASURED_CUDA_IMPORTS)
def test_what_built_cuda_kernels_import_is_allowed(symbol):
    assert object_imports.allowed_import(symbol, "cuda")


@pytest.mark.parametrize("symbol", MEASURED_C_IMPORTS)
def test_what_built_c_kernels_import_is_allowed(symbol):
    assert object_imports.allowed_import(symbol, "c")


@pytest.mark.parametrize("language", ["c", "cuda"])
def test_the_calls_a_prompt_names_as_allowed_are_the_ones_the_import_check_takes(language):
    from evokernel.harness import get_task
    from evokernel.mutations.prompts import _setting

    names = object_imports.ALLOWED_CALLS[language]
    assert names and all(object_imports.allowed_import(name, language) for name in names)
    task = get_task("attention-fwd" if language == "cuda" else "attention-fwd-cpu")
    assert ", ".join(names) in _setting(task, None)


@pytest.mark.parametrize("symbol", ["PyGILState_Ensure", "PyRun_SimpleString", "write", "read", "exit", "syscall",
                                    "pthread_create", "getppid", "dlopen", "_r_debug", "cudaLaunchKernel_ptsz",
                                    "cudaStreamCreate", "cudaDeviceSynchronize", "cuLaunchKernel"])
def test_anything_else_is_refused_for_both_languages(symbol):
    assert not object_imports.allowed_import(symbol, "c") and not object_imports.allowed_import(symbol, "cuda")


@needs_gcc
def test_an_object_importing_the_python_c_api_is_refused_by_name(tmp_path):
    library = build_c(tmp_path, "extern int PyRun_SimpleString(const char*) __attribute__((weak));\n"
                                "int evk_attention_fwd(const void* p) { return PyRun_SimpleString ? 1 : 0; }\n")
    assert object_imports.check_shared_object(library, "c") == \
        "static guard: the built object imports 'PyRun_SimpleString', which is not on the allowlist of c kernels"


@needs_gcc
def test_a_cuda_object_importing_exit_is_told_why_a_correct_kernel_may(tmp_path):
    """nvcc's host copy of a non-static __device__ function calls exit() (measured on the H200)."""
    library = build_c(tmp_path, "#include <stdlib.h>\nint evk_attention_fwd(const void* p) { if (!p) exit(1); return 0; }\n")
    assert object_imports.check_shared_object(library, "cuda") == (
        "static guard: the built object imports 'exit', which is not on the allowlist of cuda kernels (nvcc calls "
        "exit() in the host copy of a __device__ function that is not static: declare such functions static)")
