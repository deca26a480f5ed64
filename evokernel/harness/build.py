"""Build a single-file candidate into a shared object: no torch headers, cached by content hash.

Compilers run with a time limit and an environment without secrets; their output is kept
(trimmed) so that a repair prompt can show it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evokernel.harness.languages import LANGUAGES, Language
from evokernel.harness.sandbox import SCRATCH, run_isolated, toolchain_dirs

LOG_LIMIT = 6000  # characters of compiler messages kept, half from the start, half from the end
TRIMMED = "... [trimmed] ..."  # where a long log was cut as plain text (ptxas's table too)
MESSAGES_TRIMMED = "... [messages trimmed] ..."  # where only messages were cut (ptxas's table whole)
RESOURCE_LIMIT = 40000  # ptxas's per-function resource lines are kept whole up to this (a prompt's registers table)
_PTXAS_RESOURCE = re.compile(r"ptxas info\s*: (Compiling entry function|Function properties for|Used \d+ registers)"
                             r"|bytes stack frame")
# Where a candidate's source sits while it is compiled: SCRATCH in the sandbox, a build-cache
# directory without one (older logs); compiler messages name it instead of the user's file.
_SOURCE_PATH = re.compile(r"(?:/evk/scratch|[^\s:'\"`]*/build/[0-9a-f]{24}\.tmp\d+)/kernel\.(?:cu|c)\b")


@dataclass
class BuildResult:
    ok: bool
    library: Path | None
    log: str
    seconds: float
    cached: bool = False


def cache_home() -> Path:
    """Where the harness keeps what it may reuse across runs (EVOKERNEL_CACHE, else ~/.cache/evokernel)."""
    return Path(os.environ.get("EVOKERNEL_CACHE", Path.home() / ".cache" / "evokernel"))


def cache_root() -> Path:
    return cache_home() / "build"


def _trim(log: str) -> str:
    """A long log with its messages cut in the middle. ptxas's resource lines stay whole and in order (a
    Hopper kernel's 15 functions with their long names fill more than LOG_LIMIT alone, and a cut table hid
    spills from whoever read the prompt); only if they pass RESOURCE_LIMIT is the log cut as plain text."""
    if len(log) <= LOG_LIMIT:
        return log
    lines = log.splitlines()
    resources = {i for i, line in enumerate(lines) if _PTXAS_RESOURCE.search(line)}
    if sum(len(lines[i]) + 1 for i in resources) > RESOURCE_LIMIT:  # cut at whole lines (no fragment of one shown)
        half = LOG_LIMIT // 2
        return log[:half].rpartition("\n")[0] + f"\n{TRIMMED}\n" + log[-half:].partition("\n")[2]
    messages = [i for i in range(len(lines)) if i not in resources]
    kept = set(resources)
    for order in (messages, messages[::-1]):  # from the start, then from the end, half the limit each
        used = 0
        for i in order:
            used += len(lines[i]) + 1
            if used > LOG_LIMIT // 2:
                break
            kept.add(i)
    cut = [i for i in range(len(lines)) if i not in kept]  # one mark, where the first cut line was
    if not cut:
        return log
    return "\n".join(MESSAGES_TRIMMED if i == cut[0] else line
                     for i, line in enumerate(lines) if i in kept or i == cut[0])


def show_source_paths(text: str | None, name: str) -> str | None:
    """`text` (a compiler message) with the build's path of the source replaced by `name`."""
    return None if text is None else _SOURCE_PATH.sub(lambda _: name, text)


def first_error_lines(log: str, lines: int = 8) -> list[str]:
    """The compiler's first error and the lines that follow it (the offending source line, the caret)."""
    all_lines = log.splitlines()
    start = next((n for n, line in enumerate(all_lines) if re.search(r"\berror\b", line, re.IGNORECASE)), None)
    return [] if start is None else all_lines[start:start + lines]


@contextmanager
def held(lock: Path, shared: bool = False):
    """A lock on the file `lock`, exclusive unless `shared` (released when its holder ends, also when it is
    killed)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


def build(source: str, language: str, header: Path, timeout_s: float = 180.0) -> BuildResult:
    """Compile `source` (text) against the task's ABI header; reuse an earlier build of the same input.
    One process builds a given input at a time: a check whose candidate is being prebuilt waits for
    that build instead of compiling it again from the start."""
    facts = LANGUAGES[language]
    probe = facts.compile_command(Path("kernel" + facts.extension), header.parent, Path("kernel.so"))
    key = hashlib.sha256("\0".join([source, header.read_text(), *probe]).encode()).hexdigest()[:24]
    directory = cache_root() / key
    start = time.perf_counter()
    with held(directory.with_name(key + ".lock")):
        library, log_file = directory / "kernel.so", directory / "build.log"
        if library.exists():
            return BuildResult(True, library, log_file.read_text() if log_file.exists() else "",
                               time.perf_counter() - start, cached=True)
        ok, log = _compile(source, facts, header, directory, timeout_s)
    # the time includes any wait for another process's build of the same input
    return BuildResult(ok, library if ok else None, log, time.perf_counter() - start)


def _compile(source: str, facts: Language, header: Path, directory: Path, timeout_s: float) -> tuple[bool, str]:
    """Compile into a scratch directory beside `directory`, which it becomes on success; (ok, log)."""
    suffix = facts.extension
    scratch = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    (scratch / ("kernel" + suffix)).write_text(source)
    command = facts.compile_command(SCRATCH / ("kernel" + suffix), header.parent, SCRATCH / "kernel.so")
    try:
        if shutil.which(command[0]) is None:
            raise FileNotFoundError(command[0])
        proc = run_isolated(command, scratch, [header.parent, *toolchain_dirs(command[0])], timeout_s)
        log, ok = _trim((proc.stdout + proc.stderr).strip()), proc.returncode == 0
        log = log.replace(str(scratch), str(SCRATCH))  # the same log with or without the sandbox
    except subprocess.TimeoutExpired:
        log, ok = f"compile timed out after {timeout_s:.0f} s", False
    except FileNotFoundError:
        log, ok = f"compiler '{command[0]}' not found on this machine", False
    (scratch / "build.log").write_text(log)
    if not ok:
        shutil.rmtree(scratch, ignore_errors=True)
        return False, log
    try:
        scratch.rename(directory)
    except OSError:  # another host built the same source meanwhile (a shared cache directory)
        shutil.rmtree(scratch, ignore_errors=True)
    return True, log
