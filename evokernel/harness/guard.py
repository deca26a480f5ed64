"""Static guard: reject candidates that include or call what a task forbids, before building them.

Candidates are single self-contained files: the task's ABI header and a short list of system
headers may be included; libraries (CUTLASS, CuTe, cuBLAS, cuDNN), dynamic loading, processes,
sockets, threads that outlive the call, file I/O and the environment are out.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ALLOWED_INCLUDES = {
    "cuda": {
        "cuda_runtime.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h", "mma.h", "cuda.h",
        "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cooperative_groups.h",
        "cooperative_groups/memcpy_async.h", "cuda/barrier", "cuda/pipeline", "cuda/ptx",
        "stdint.h", "cstdint", "math.h", "cmath", "float.h", "cfloat", "stddef.h", "cstddef",
        "limits.h", "climits", "type_traits", "algorithm", "utility", "assert.h", "cassert",
    },
    "c": {
        "math.h", "stdint.h", "stddef.h", "stdlib.h", "string.h", "float.h", "limits.h", "omp.h",
        "immintrin.h", "stdbool.h", "assert.h",
    },
}

# Word-level patterns with the reason given back to the author of the kernel.
FORBIDDEN_CALLS = [
    (r"\b(cutlass|cute|cublas\w*|cudnn\w*|cublasLt\w*|cufft\w*|curand\w*)\b", "uses a forbidden library"),
    (r"\b(dlopen|dlsym|dlmopen)\b", "loads code at run time"),
    (r"\b(system|popen|fork|vfork|execl|execle|execlp|execv|execve|execvp|posix_spawn|syscall)\s*\(",
     "starts processes or makes system calls"),
    (r"\b(socket|connect|bind|listen|accept|gethostbyname|getaddrinfo)\s*\(", "opens network connections"),
    (r"\b(fopen|freopen|open|openat|creat|fwrite|unlink|remove|rename|mmap)\s*\(", "does file I/O"),
    (r"\b(FILE|ifstream|ofstream|fstream)\b", "does file I/O"),
    (r"\b(getenv|setenv|putenv|environ)\b", "reads or changes the environment"),
    (r"\b(pthread_create|thrd_create|std::thread|std::async)\b", "starts threads that outlive the call"),
    (r"\b(cudaStreamCreate\w*|cudaStreamPerThread|cudaDeviceSynchronize|cudaStreamSynchronize|cudaDeviceReset)\b",
     "uses streams or synchronisation other than the harness's stream"),
    (r"\b(cudaMallocManaged|cudaHostAlloc|cudaMallocHost|cudaSetDevice|cudaDeviceSetLimit)\b",
     "changes device state or allocates managed/host memory"),
]

# Undefined dynamic symbols that no C candidate may import (checked on the built shared object).
FORBIDDEN_SYMBOLS = {
    "system", "popen", "fork", "vfork", "execv", "execve", "execvp", "execl", "execlp", "dlopen",
    "dlsym", "socket", "connect", "fopen", "fopen64", "open", "open64", "openat", "creat", "unlink",
    "getenv", "pthread_create", "syscall", "mmap", "mmap64", "ptrace", "kill",
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def _strip_comments_and_strings(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.DOTALL)
    source = re.sub(r"//[^\n]*", " ", source)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', source)


def check_source(source: str, language: str, abi_header: str) -> str | None:
    """Return the reason the source is refused, or None when it may be built."""
    for name in INCLUDE_RE.findall(source):
        if name != abi_header and name not in ALLOWED_INCLUDES[language]:
            return f"static guard: #include <{name}> is not allowed (only the ABI header and standard headers)"
    code = _strip_comments_and_strings(source)
    if re.search(r"^\s*#\s*pragma\s+comment\s*\(\s*lib", code, re.MULTILINE):
        return "static guard: links a library (#pragma comment(lib))"
    for pattern, reason in FORBIDDEN_CALLS:
        match = re.search(pattern, code)
        if match:
            line = code.count("\n", 0, match.start()) + 1
            return f"static guard: {reason} ('{match.group(0).strip('( ')}' at line {line})"
    if "evk_attention_fwd" not in code:
        return "static guard: the entry point evk_attention_fwd is not defined"
    return None


def check_shared_object(path: Path) -> str | None:
    """For host-code tasks: refuse a built object that imports a forbidden symbol."""
    try:
        listing = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True,
                                 text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None  # nm missing: the source guard already ran
    for line in listing.splitlines():
        symbol = line.split()[-1].split("@")[0] if line.split() else ""
        if symbol in FORBIDDEN_SYMBOLS:
            return f"static guard: the built object imports '{symbol}'"
    return None
