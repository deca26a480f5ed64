"""What a prompt shows of a kernel's build log: ptxas's registers, spills, stack frame, barriers and static shared
memory per kernel function as a table (names demangled), and the compiler's own messages, capped. An answerer
reads spills and register pressure here instead of rebuilding the kernel."""

from __future__ import annotations

import re

from evokernel.harness.build import MESSAGES_TRIMMED, TRIMMED, show_source_paths

FUNCTIONS_SHOWN = 24  # kernel functions in the registers table
MESSAGE_LINES = 12  # compiler messages shown (warnings, ptxas notes), each cut at MESSAGE_WIDTH characters
MESSAGE_WIDTH = 300

_PTXAS_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPERTIES = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
_PTXAS_ROUTINE = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for|Used \d+ registers"
                            r"|Compile time|\d+ bytes gmem)|^\s*\d+ bytes stack frame")
# How a whole line of a build log starts; the line right after a plain cut that does not start so is the rest of a
# line that a cut of an earlier harness split (its logs are stored so: "ime = 734.580 ms").
_LINE_START = re.compile(r"^(ptxas|nvcc|\s|In file|\S+\(\d+\)|\S+:\d+|\S+\.(cu|c|h|cuh|cpp):|warning|error|note)")
_MANGLED = re.compile(r"_Z\w+")
_LITERAL = re.compile(r"L([bcahstijlmxy])(n?)(\d+)E")
_SOURCE_NAME = re.compile(r"(\d+)")


def _demangle(symbol: str) -> str:
    """`ns::name<1,true>` for an Itanium-mangled name of the usual templated-kernel shape (ptxas names kernels
    mangled), the parameter list left out; any other symbol as it is."""
    if not symbol.startswith("_Z"):
        return symbol
    nested, parts = symbol.startswith("_ZN"), []
    position = 3 if nested else 2
    while match := _SOURCE_NAME.match(symbol, position):
        start = match.end()
        name, position = symbol[start:start + int(match[1])], start + int(match[1])
        if symbol.startswith("I", position):
            arguments, position = _template_arguments(symbol, position + 1)
            if arguments is None:
                return symbol
            name += "<" + ",".join(arguments) + ">"
        parts.append(name)
        if not nested:
            break
    if not parts or (nested and not symbol.startswith("E", position)):
        return symbol
    return "::".join(parts)


def _template_arguments(symbol: str, position: int) -> tuple[list[str] | None, int]:
    """Integer and boolean literals and plain type names up to the closing E; None for anything else."""
    arguments = []
    while not symbol.startswith("E", position):
        if literal := _LITERAL.match(symbol, position):
            kind, negative, digits = literal.groups()
            arguments.append(("false", "true")[digits == "1"] if kind == "b" else "-" * bool(negative) + digits)
            position = literal.end()
        elif name := _SOURCE_NAME.match(symbol, position):
            arguments.append(symbol[name.end():name.end() + int(name[1])])
            position = name.end() + int(name[1])
        else:
            return None, position
    return arguments, position + 1


def register_summary(log: str) -> str:
    """ptxas's registers, spills, stack frame, barriers and static shared memory per kernel function, from a
    build log of `nvcc -Xptxas -v`; "" when the log has no such lines."""
    functions: dict[str, dict] = {}
    entry = properties = None
    for line in log.splitlines():
        if match := _PTXAS_ENTRY.search(line):
            entry = match[1]
            functions[entry] = {"arch": match[2]}
        elif match := _PTXAS_PROPERTIES.search(line):
            properties = match[1]
        elif (match := _PTXAS_FRAME.search(line)) and entry is not None and properties == entry:
            functions[entry].update(stack=match[1], stores=match[2], loads=match[3])
        elif (match := _PTXAS_USED.search(line)) and entry is not None:
            barriers = re.search(r"used (\d+) barriers", line)
            smem = re.search(r"(\d+) bytes smem", line)
            functions[entry].update(registers=match[1], barriers=barriers[1] if barriers else "-",
                                    smem=smem[1] if smem else "0")
    if not functions:
        return ""
    arches = ", ".join(sorted({f["arch"] for f in functions.values()}))
    lines = [f"### Registers and spills per kernel function (ptxas, {arches})",
             "function | registers | spill stores / loads (bytes) | stack frame (bytes) | barriers | "
             "static smem (bytes)"]
    for name, f in list(functions.items())[:FUNCTIONS_SHOWN]:
        lines.append(f"{_demangle(name)} | {f.get('registers', '?')} | {f.get('stores', '?')} / "
                     f"{f.get('loads', '?')} | {f.get('stack', '?')} | {f.get('barriers', '?')} | {f.get('smem', '?')}")
    if len(functions) > FUNCTIONS_SHOWN:
        lines.append(f"(and {len(functions) - FUNCTIONS_SHOWN} more functions)")
    if TRIMMED in log:
        lines.append("(the build log was cut in the middle: functions compiled there are missing)")
    return "\n".join(lines) + "\n"


def compiler_messages(log: str, source_name: str) -> str:
    """The build log's warnings and notes (not ptxas's routine lines), capped, kernel names demangled."""
    all_lines = (show_source_paths(log, source_name) or "").splitlines()
    fragments = {n + 1 for n, line in enumerate(all_lines[:-1])
                 if line.strip() == TRIMMED and not _LINE_START.match(all_lines[n + 1])}
    lines = [line for n, line in enumerate(all_lines) if line.strip() and n not in fragments
             and line.strip() not in (TRIMMED, MESSAGES_TRIMMED) and not _PTXAS_ROUTINE.search(line)]
    if not lines:
        return ""
    shown = [_MANGLED.sub(lambda m: _demangle(m[0]), line)[:MESSAGE_WIDTH] for line in lines[:MESSAGE_LINES]]
    more = f"\n(and {len(lines) - MESSAGE_LINES} more lines)" if len(lines) > MESSAGE_LINES else ""
    return "### Compiler messages\n```\n" + "\n".join(shown) + f"\n```{more}\n"
