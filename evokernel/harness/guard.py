"""Static guard: a cheap first filter on a candidate's source (the import check on what it builds is
`evokernel.harness.object_imports`).

Candidates are single self-contained files: the task's ABI header and a short list of system
headers may be included; libraries (CUTLASS, CuTe, cuBLAS, cuDNN), dynamic loading, processes,
sockets, threads that outlive the call, file I/O and the environment are out.

`check_source` refuses, with a one-line reason naming the line, what is plainly out: headers not
on the list, includes through macros, unknown directives and pragmas, assembler directives that read
files, symbols renamed with asm labels, and calls of forbidden functions by name. Every pattern runs
in time linear in the size of the source, and sources over `MAX_SOURCE_BYTES` are refused unread.
A determined author can still hide a call from a word scan (token pasting, say), so the real
enforcement is `object_imports.check_shared_object`: the built object's undefined dynamic symbols, for C
and CUDA alike.
"""

from __future__ import annotations

import bisect
import re

from evokernel.source.lexer import Lexed, is_word_char, lex, search_word, word_pattern

MAX_SOURCE_BYTES = 512 * 1024

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

ALLOWED_DIRECTIVES = {
    "", "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
    "include", "pragma", "error", "warning", "line",
}

# Pragmas that only steer code generation; any other (comment(lib), GCC dependency, push_options...) is out.
ALLOWED_PRAGMA_RE = re.compile(
    r"[ \t\f\v]+(?:once|unroll|nounroll|omp|GCC[ \t\f\v]+(?:ivdep|unroll)|nv_diag_suppress|diag_suppress)\b")

# Word-level patterns with the reason given back to the author of the kernel.
FORBIDDEN_CALLS = [
    (r"\b(cutlass|cute|cublas\w*|cudnn\w*|cublasLt\w*|cufft\w*|curand\w*)\b", "uses a forbidden library"),
    (r"\b(dlopen|dlsym|dlmopen|dlvsym)\b", "loads code at run time"),
    (r"\b(system|popen|fork|vfork|execl|execle|execlp|execv|execve|execvp|execvpe|fexecve|posix_spawnp?"
     r"|syscall|ptrace|kill)\s*\(",
     "starts processes or makes system calls"),
    (r"\b(socket|connect|bind|listen|accept|gethostbyname|getaddrinfo)\s*\(", "opens network connections"),
    (r"\b(fopen|fopen64|freopen|open|open64|openat|openat64|creat|creat64|fwrite|unlink|unlinkat|remove|rename"
     r"|mmap|mmap64|mprotect|memfd_create|shm_open|chdir)\s*\(", "does file I/O"),
    (r"\b(FILE|ifstream|ofstream|fstream)\b", "does file I/O"),
    (r"\b(getenv|secure_getenv|setenv|unsetenv|putenv|clearenv|environ|__environ)\b",
     "reads or changes the environment"),
    (r"\b(pthread_create|thrd_create|std::thread|std::jthread|std::async)\b", "starts threads that outlive the call"),
    (r"\b(cudaStreamCreate\w*|cudaStreamPerThread|cudaDeviceSynchronize|cudaStreamSynchronize|cudaDeviceReset)\b",
     "uses streams or synchronisation other than the harness's stream"),
    (r"\b(cudaMallocManaged|cudaHostAlloc|cudaMallocHost|cudaSetDevice|cudaDeviceSetLimit)\b",
     "changes device state or allocates managed/host memory"),
]

# --- the source guard ---

_TRIGRAPH_RE = re.compile(r"\?\?[=/'()!<>\-]")

# a directive: '#' (or '%:') first on its line, after blanks
_DIRECTIVE_RE = re.compile(r"\n[ \t\f\v]*(?:#|%:)[ \t\f\v]*(?P<name>\w*)")
_INCLUDE_NAME_RE = re.compile(r'[ \t\f\v]*(?:<(?P<angle>[^>\n]*)>|(?P<quote>""))')
_PROBE_RE = word_pattern(r"\b(_Pragma|__pragma|__has_include_next|__has_include|__has_embed)\b")
_ASM_FILE_RE = re.compile(r"\.(incbin|include)\b", re.IGNORECASE)
# asm( followed by literals (and macro names) only: a label, or a basic asm statement; the context decides
_ASM_LABEL_RE = word_pattern(r'\b(?:__asm__|__asm|asm)[ \t\n\f\v]*\((?P<args>[\w \t\n\f\v"]*)\)')
_RENAME_ATTRIBUTE_RE = re.compile(r"(alias|weakref|symver)_*[ \t\n\f\v]*\([ \t\n\f\v]*\"\"")
_STATEMENT_WORDS = {"else", "do", "__extension__", "return"}
_CONDITION_WORDS = {"if", "while", "for", "switch"}
_ATTRIBUTE_WORDS = {"__attribute__", "__attribute", "__declspec", "alignas", "_Alignas"}
_MACRO_DEFINITION_RE = re.compile(r"[ \t\f\v]*(?:#|%:)[ \t\f\v]*define[ \t\f\v]+[\w$]+[ \t\f\v]*\Z")
_FORBIDDEN_CALLS = [(word_pattern(pattern), reason) for pattern, reason in FORBIDDEN_CALLS]


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KB"


def _show(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= 60 else text[:57] + "..."


def check_source(source: str, language: str, abi_header: str, entry: str) -> str | None:
    """Return the reason the source is refused (one line), or None when it may be built; `entry` is the
    symbol the kernel must define."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        limit = _size(MAX_SOURCE_BYTES).replace(".0 ", " ")
        return f"static guard: the kernel is {_size(size)}; the limit is {limit}"
    trigraph = _TRIGRAPH_RE.search(source)
    if trigraph:
        line = source.count("\n", 0, trigraph.start()) + 1
        return f"static guard: uses a trigraph ('{trigraph.group()}' at line {line})"
    lexed = lex(source, language)
    return (_check_directives(lexed, language, abi_header) or _check_probes(lexed) or _check_asm_files(lexed)
            or _check_asm_labels(lexed) or _check_forbidden_words(lexed)
            or (None if re.search(rf"\b{re.escape(entry)}\b", lexed.code)
                else f"static guard: the entry point {entry} is not defined"))


def _rest_of_line(lexed: Lexed, start: int) -> str:
    """The code from `start` to the end of its line, with its string literals written back."""
    code = lexed.code
    end = code.find("\n", start)
    end = len(code) if end < 0 else end
    pieces, last = [], start
    for match in re.finditer('""', code[start:end]):
        literal = lexed.literals.get(start + match.start())
        if literal is not None:
            pieces += [code[last:start + match.start()], '"', literal, '"']
            last = start + match.end()
    return " ".join(("".join(pieces) + code[last:end]).split())


def _check_directives(lexed: Lexed, language: str, abi_header: str) -> str | None:
    code = "\n" + lexed.code
    for match in _DIRECTIVE_RE.finditer(code):
        name, at = match.group("name"), match.start()  # the line start, in lexed.code
        if name not in ALLOWED_DIRECTIVES:
            return f"static guard: the directive #{_show(name)} is not allowed (line {lexed.line(at)})"
        if name == "include":
            target = _INCLUDE_NAME_RE.match(lexed.code, match.end() - 1)
            if not target:
                written = _rest_of_line(lexed, match.end() - 1)
                return (f"static guard: includes a computed name ('#include {_show(written)}' at line "
                        f"{lexed.line(at)}); only <name> or \"name\" is allowed")
            header = target.group("angle")
            if header is None:
                header = lexed.literals.get(target.start("quote"), "")
            if header != abi_header and header not in ALLOWED_INCLUDES[language]:
                return (f"static guard: #include <{_show(header)}> is not allowed at line {lexed.line(at)} "
                        "(only the ABI header and standard headers)")
        elif name == "pragma" and not ALLOWED_PRAGMA_RE.match(lexed.code, match.end() - 1):
            written = _rest_of_line(lexed, match.end() - 1)
            return f"static guard: #pragma {_show(written)} is not allowed (line {lexed.line(at)})"
    return None


def _check_probes(lexed: Lexed) -> str | None:
    match = search_word(_PROBE_RE, lexed.code)
    if match and not is_word_char(lexed.code[match.end():match.end() + 1] or " "):
        return f"static guard: {match.group()} is not allowed (line {lexed.line(match.start())})"
    return None


def _check_asm_files(lexed: Lexed) -> str | None:
    """Assembler directives that read a file at build time: in a literal, across adjacent literals,
    or in code (a macro's stringification)."""
    match = _ASM_FILE_RE.search(lexed.code)
    if match:
        return (f"static guard: asm reads a file at build time (.{match.group(1).lower()}) "
                f"at line {lexed.line(match.start())}")
    positions, starts, total = list(lexed.literals), [], 0
    for position in positions:
        starts.append(total)
        total += len(lexed.literals[position])
    match = _ASM_FILE_RE.search("".join(lexed.literals.values()))
    if match:
        position = positions[bisect.bisect_right(starts, match.start()) - 1]
        return (f"static guard: asm reads a file at build time (.{match.group(1).lower()}) "
                f"at line {lexed.line(position)}")
    return None


def _skip_space_back(code: str, i: int) -> int:
    """The index of the last non-blank character at or before i (-1 when none)."""
    while i >= 0 and code[i] in " \t\n\f\v":
        i -= 1
    return i


def _word_before(code: str, end: int) -> tuple[str, int]:
    """The identifier ending at index `end` (inclusive), and the index before it."""
    i = end
    while i >= 0 and is_word_char(code[i]):
        i -= 1
    return code[i + 1:end + 1], i


class _Brackets:
    """The opener of every ')' and ']' in the code, found in one pass when first needed."""

    def __init__(self, code: str):
        self.code, self._openers = code, None

    def opener(self, index: int) -> int:
        if self._openers is None:
            self._openers, stacks = {}, {"(": [], "[": []}
            for match in re.finditer(r"[()\[\]]", self.code):
                char = match.group()
                if char in "([":
                    stacks[char].append(match.start())
                else:
                    stack = stacks["(" if char == ")" else "["]
                    if stack:
                        self._openers[match.start()] = stack.pop()
        return self._openers.get(index, -1)


def _defines(code: str, name_start: int, name_end: int) -> bool:
    """Whether code[name_start:name_end] is the name in a '#define NAME' that opens its line."""
    line_start = code.rfind("\n", 0, name_start) + 1
    return _MACRO_DEFINITION_RE.match(code, line_start, name_end) is not None


def _is_asm_label(code: str, asm_start: int, brackets: _Brackets) -> bool:
    """Whether asm(...) at asm_start follows a declarator (a label) rather than starting a statement
    (or a macro's body)."""
    i = _skip_space_back(code, asm_start - 1)
    while i >= 0:
        char = code[i]
        if char == ")":
            opener = brackets.opener(i)
            if opener < 0:
                return True
            word, before = _word_before(code, _skip_space_back(code, opener - 1))
            if word in _CONDITION_WORDS:
                return False  # if (...) asm("nop");
            if word in _ATTRIBUTE_WORDS:
                i = _skip_space_back(code, before)
                continue
            return not (word and _defines(code, before + 1, before + 1 + len(word)))  # #define F(x) asm("...")
        if char == "]":
            opener = brackets.opener(i)
            if opener >= 0 and code[opener + 1:opener + 2] == "[":  # a [[...]] attribute
                i = _skip_space_back(code, opener - 1)
                continue
            return True  # an array declarator
        if is_word_char(char):
            word, before = _word_before(code, i)
            if word in _STATEMENT_WORDS:
                return False
            return not _defines(code, before + 1, i + 1)  # #define NAME asm("...")
        return False  # ; { } : , = or the start: a statement
    return False


def _check_asm_labels(lexed: Lexed) -> str | None:
    code, brackets, start = lexed.code, _Brackets(lexed.code), 0
    while match := search_word(_ASM_LABEL_RE, code, start):
        start = match.end()
        args = match.group("args")
        if '""' not in args or not _is_asm_label(code, match.start(), brackets):
            continue
        offset = match.start("args")
        name = "".join(lexed.literals.get(offset + m.start(), "") for m in re.finditer('""', args))
        return (f"static guard: renames a symbol with an asm label ('{_show(name.lstrip('*'))}' "
                f"at line {lexed.line(match.start())})")
    for match in _RENAME_ATTRIBUTE_RE.finditer(code):
        i = match.start() - 1
        while i >= 0 and code[i] == "_":
            i -= 1
        if i < 0 or not is_word_char(code[i]):
            return (f"static guard: renames a symbol with an attribute ('{match.group(1)}' "
                    f"at line {lexed.line(match.start())})")
    return None


def _check_forbidden_words(lexed: Lexed) -> str | None:
    for pattern, reason in _FORBIDDEN_CALLS:
        match = search_word(pattern, lexed.code)
        if match:
            return f"static guard: {reason} ('{match.group(0).strip('( ')}' at line {lexed.line(match.start())})"
    return None
