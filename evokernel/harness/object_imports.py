"""The import check on a built kernel object: its undefined dynamic symbols against an allowlist per language
(and a list no object may import), read with `nm`. The source guard (`guard.check_source`) is a cheap first
filter; this is the enforcement, for C and CUDA alike, since a call can be hidden from a word scan but not
from the linker.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# Undefined dynamic symbols that no candidate may import (checked on the built shared object). A name
# matches with leading underscores, a __libc_/_IO_ prefix, a 64 suffix and a fortify (_2, _chk) suffix.
_LIBC_BASES = "|".join([
    # files
    r"open|openat2?|creat|fopen|freopen|opendir|name_to_handle_at|open_by_handle_at|tmpfile|mkstemps?|mkostemps?",
    r"unlink(?:at)?|rename(?:at2?)?|remove|rmdir|mkdir(?:at)?|s?link(?:at)?|symlink(?:at)?|truncate|chdir|fchdir"
    r"|chroot|chmod|chown",
    # processes and system calls
    r"f?exec(?:l|le|lp|v|ve|vp|vpe|veat)|posix_spawnp?|fork|_Fork|vfork|clone[23]?|system|popen|syscall|ptrace",
    r"kill|tkill|tgkill|killpg|prctl|arch_prctl|process_vm_(?:readv|writev)",
    r"sigaction|signal|timer_create|setitimer|alarm",
    # dynamic loading
    r"dl(?:open|sym|mopen|vsym|info|addr1?)(?:_mode)?|dl_iterate_phdr",
    # network
    r"socket(?:pair)?|connect|bind|listen|accept4?|send(?:to|msg|mmsg|file)?|recv(?:from|msg|mmsg)?"
    r"|getaddrinfo|gethostbyname2?(?:_r)?",
    # environment
    r"(?:secure_)?getenv|setenv|unsetenv|putenv|clearenv|environ",
    # threads that outlive the call
    r"pthread_create|thrd_create",
    # memory mapping
    r"mmap|mremap|mprotect|pkey_mprotect|memfd_create|shm_open",
])
FORBIDDEN_SYMBOL_RE = re.compile(
    rf"_*(?:libc_|IO_)?(?:new_)?(?:{_LIBC_BASES})(?:64)?(?:_2|_chk)?"
    # the CUDA runtime calls the source guard forbids (per-thread default stream variants too)
    r"|(?:cudaStreamCreate(?:WithFlags|WithPriority)?|cudaDeviceSynchronize|cudaStreamSynchronize|cudaDeviceReset"
    r"|cudaMallocManaged|cudaHostAlloc|cudaMallocHost|cudaSetDevice|cudaDeviceSetLimit)(?:_v\d+)?(?:_pt[sd]z?)?"
    # C++: std::thread (and std::async through it), file streams, std::filesystem
    r"|_ZNSt6thread\w*|_ZNSt\d+basic_(?:i|o)?fstream\w*|_ZNSt\d+basic_filebuf\w*open\w*|_ZNSt\d*filesystem\w*"
    r"|_ZNSt7__cxx1110filesystem\w*")


# What a C kernel's object may import: the language runtime the contract needs (math, memory and string
# functions, formatting into a buffer, OpenMP, compiler support) and nothing else. An import outside it is
# refused with its name; the runner's seccomp filter stands behind this for what a kernel does without
# importing (raw system calls).
_MATH = (r"(?:a?(?:sin|cos|tan)h?|atan2|sqrt|cbrt|exp(?:2|10|m1)?|log(?:2|10|1p|b)?|pow|fabs|fmin|fmax|fma|fdim"
         r"|floor|ceil|round|l?lround|trunc|l?lrint|rint|nearbyint|fmod|remainder|remquo|hypot|erfc?|[lt]gamma"
         r"|ldexp|frexp|modf|copysign|nan|scalbl?n|ilogb|sincos|exp10)[fl]?")
ALLOWED_C_IMPORT_RE = re.compile(
    rf"{_MATH}|__{_MATH}_finite|__(?:isnan|isinf|finite|fpclassify|signbit)[fl]?"
    r"|mem(?:cpy|move|set|cmp|chr)|__mem(?:cpy|move|set)_chk|str(?:n?len|n?cmp|n?cpy|chr)|__strcpy_chk"
    r"|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign|qsort|bsearch|l?l?abs|l?l?div"
    r"|v?s?n?printf|__v?s?n?printf_chk|puts|putchar|abort|__assert_fail|__stack_chk_fail|__errno_location"
    r"|GOMP_\w+|omp_\w+|__cxa_finalize|__gmon_start__|_ITM_(?:de)?registerTMCloneTable|__cpu_(?:indicator_init|model)"
    r"|__(?:add|sub|mul|div|mod|udiv|umod|neg|extend|trunc|fix|fixuns|float|floatun|pow|cmp|ucmp|popcount|clz|ctz)"
    r"[a-z]{2,6}\d?")


# What a CUDA kernel's object may import besides that: the runtime's registration and launch entry points,
# the runtime calls a kernel makes on the harness's stream (attributes, occupancy, asynchronous memory
# work and allocation, errors, the driver entry point that TMA descriptors need), and the C++ runtime's
# support (exceptions, static guards, new/delete). Written from the imports of 108 kernels built on the
# H200 (the tree's and two search runs'; experiments/trusted_timing/RESULTS.md).
ALLOWED_CUDA_IMPORT_RE = re.compile(
    r"__cuda(?:RegisterFatBinary(?:End)?|UnregisterFatBinary|RegisterFunction|RegisterVar|RegisterManagedVar"
    r"|RegisterTexture|RegisterSurface|InitModule|PushCallConfiguration|PopCallConfiguration|LaunchKernel"
    r"|GetKernel)"
    r"|cuda(?:LaunchKernel(?:ExC)?|LaunchCooperativeKernel|FuncSetAttribute|FuncGetAttributes|FuncSetCacheConfig"
    r"|GetLastError|PeekAtLastError|GetErrorString|GetErrorName|GetDevice|DeviceGetAttribute|MemGetInfo"
    r"|GetDeviceProperties(?:_v2)?|Occupancy\w+|Memset(?:2D)?Async|Memcpy(?:2D)?Async|MemcpyToSymbolAsync"
    r"|MemcpyFromSymbolAsync|GetSymbolAddress|MallocAsync|FreeAsync|Malloc|Free|StreamGetCaptureInfo(?:_v\d)?"
    r"|GetDriverEntryPoint(?:ByVersion)?)(?:_v\d+)?"
    r"|__cxa_(?:atexit|finalize|guard_(?:acquire|release|abort)|pure_virtual|begin_catch|end_catch|rethrow"
    r"|throw|allocate_exception|free_exception)|__gxx_personality_v0|_Unwind_Resume"
    r"|_Zn[wa][mj](?:St11align_val_t)?|_Zd[la]Pv(?:[mj])?(?:St11align_val_t)?|_ZSt9terminatev"
    r"|_ZSt\d+__throw_\w+|_ZTVN10__cxxabiv1\w+")


# The allowlists as a kernel's author needs them (a prompt states them): calls each pattern above takes (a test
# checks every name against them), and what the names do not say.
_C_CALLS = ("sqrtf", "expf", "exp2f", "fmaf", "fminf", "fmaxf", "memcpy", "memmove", "memset", "malloc", "calloc",
            "realloc", "free", "aligned_alloc", "posix_memalign", "qsort", "snprintf", "omp_get_thread_num",
            "omp_get_num_threads", "GOMP_parallel")
ALLOWED_CALLS = {
    "c": _C_CALLS,
    "cuda": ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaFuncSetAttribute",
             "cudaFuncGetAttributes", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
             "cudaOccupancyMaxActiveClusters", "cudaGetDevice", "cudaDeviceGetAttribute", "cudaGetDeviceProperties",
             "cudaMemGetInfo", "cudaMemsetAsync", "cudaMemcpyAsync", "cudaMemcpyToSymbolAsync", "cudaGetSymbolAddress",
             "cudaMallocAsync", "cudaFreeAsync", "cudaMalloc", "cudaFree", "cudaGetLastError", "cudaPeekAtLastError",
             "cudaGetErrorString", "cudaGetDriverEntryPoint", *_C_CALLS),
}
ALLOWED_CALLS_NOTE = {
    "c": "the other <math.h> functions too",
    "cuda": "the other <math.h> functions and C++ new/delete too; cudaLaunchKernelEx (it calls cudaLaunchKernelExC) "
            "with launch attributes such as clusters or programmatic dependent launch; driver functions such as "
            "cuTensorMapEncodeTiled only through cudaGetDriverEntryPoint",
}


def allowed_import(symbol: str, language: str) -> bool:
    """Whether a built object of `language` may import `symbol` (a name from `nm`, version suffix allowed)."""
    name = symbol.split("@")[0]
    if ALLOWED_C_IMPORT_RE.fullmatch(name):
        return True
    return language == "cuda" and ALLOWED_CUDA_IMPORT_RE.fullmatch(name) is not None


def forbidden_import(symbol: str) -> bool:
    """Whether a built object may not import `symbol` (a name from `nm`, version suffix allowed)."""
    return FORBIDDEN_SYMBOL_RE.fullmatch(symbol.split("@")[0]) is not None


# Why a correct kernel may import a refused name, said with the refusal. nvcc gives the host copy of a __device__
# function with external linkage a body that calls exit() (measured on the H200: the import goes with `static`).
HINTS = {("cuda", "exit"): " (nvcc calls exit() in the host copy of a __device__ function that is not static: "
                           "declare such functions static)"}


def check_shared_object(path: Path, language: str | None = None) -> str | None:
    """Refuse a built object that imports a symbol outside its language's allowlist, or (any object, and
    one of no given language) on the list of forbidden ones. The object must be linked so that its own imports show (CUDA: against the shared
    runtime, see build.compile_command). An object that passed before, unchanged, is not read again: a
    search checks the task's original at every evaluation."""
    try:
        stat = Path(path).stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size, language)
    except OSError:
        key = None
    if key in _PASSED_OBJECTS:
        return None
    verdict = _read_imports(path, language)
    if verdict is None and key is not None:
        _PASSED_OBJECTS.add(key)
    return verdict


_PASSED_OBJECTS: set[tuple[str, int, int, str | None]] = set()  # (path, mtime, size, language): imports passed


def _read_imports(path: Path, language: str | None) -> str | None:
    try:
        proc = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True,
                              text=True, timeout=60, check=False)
    except OSError:
        return "static guard: nm is not available to check the built object's imports"
    except subprocess.TimeoutExpired:
        return "static guard: nm timed out reading the built object's imports"
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        return f"static guard: nm could not read the built object's imports ({first[:60]})"
    for line in proc.stdout.splitlines():
        fields = line.split()
        if not fields:
            continue
        name = fields[-1].split("@")[0]
        if language is not None and not allowed_import(name, language):
            return (f"static guard: the built object imports '{name}', which is not on the allowlist of {language} "
                    f"kernels{HINTS.get((language, name), '')}")
        if forbidden_import(fields[-1]):
            return f"static guard: the built object imports '{name}'"
    return None
