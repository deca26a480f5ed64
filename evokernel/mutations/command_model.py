"""The `cmd:` model: a command line that answers a prompt (a coding agent, a local model's CLI, a script).

`llm.models: [{model: "cmd:my-agent --flag"}]` or `--model 'cmd:my-agent --flag'`. The command runs on the
driver's side as the user's own tool (never in the candidate sandbox), in a fresh scratch directory, with
the driver's environment plus:
    EVOKERNEL_PROMPT_FILE   the prompt, as a file (the prompt is also on its stdin)
    EVOKERNEL_ANSWER_FILE   where it may write its answer (else its stdout is the answer)
    EVOKERNEL_WORK_DIR      its scratch directory (also its working directory), removed afterwards
The answer is parsed like any model's (a full file or SEARCH/REPLACE edits). A non-zero exit, a timeout
(the whole process group is killed) or an empty answer is a `CommandFailed` with its reason.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evokernel.errors import BadInput

PREFIX = "cmd:"
STDERR_TAIL = 400  # characters of the command's stderr kept in a failure's detail


def is_command(model: str) -> bool:
    return model.startswith(PREFIX)


def command_line(model: str) -> list[str]:
    """The argument list of a `cmd:` model; BadInput when it is empty or not one shell word list."""
    try:
        words = shlex.split(model[len(PREFIX):])
    except ValueError as exc:
        raise BadInput(f"model '{model}': not a command line ({exc})") from None
    if not words:
        raise BadInput(f"model '{model}': no command after '{PREFIX}'")
    return words


def check_command(model: str) -> None:
    """BadInput when the command's program cannot be found (checked when the run starts)."""
    program = command_line(model)[0]
    if shutil.which(program) is None:
        raise BadInput(f"model '{model}': command '{program}' not found (not on PATH, or not executable)")


class CommandFailed(Exception):
    """The command gave no answer: `reason` in a few words (counted), `detail` for the record."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class CommandAnswer:
    text: str
    latency_s: float


def run_command(model: str, prompt: str, timeout_s: float, scratch_parent: Path | None = None) -> CommandAnswer:
    """Run the command on the prompt; its answer, or CommandFailed."""
    words = command_line(model)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evokernel-cmd-", dir=scratch_parent) as scratch:
        prompt_file, answer_file = Path(scratch) / "prompt.md", Path(scratch) / "answer.md"
        prompt_file.write_text(prompt)
        env = {**os.environ, "EVOKERNEL_PROMPT_FILE": str(prompt_file), "EVOKERNEL_ANSWER_FILE": str(answer_file),
               "EVOKERNEL_WORK_DIR": scratch}
        try:
            process = subprocess.Popen(words, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       cwd=scratch, env=env, start_new_session=True)
        except OSError as exc:
            raise CommandFailed("command did not start", f"{words[0]}: {exc.strerror or exc}") from None
        try:
            stdout, stderr = process.communicate(prompt.encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise CommandFailed("timeout", f"no answer within {timeout_s:g} s (llm.timeout_s)") from None
        finally:
            _kill_group(process)  # anything it left running in the background
        if process.returncode != 0:
            tail = " ".join(stderr.decode(errors="replace").split())[-STDERR_TAIL:]
            raise CommandFailed(f"command exited {process.returncode}", tail)
        raw = answer_file.read_bytes() if answer_file.is_file() else stdout
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise CommandFailed("answer not UTF-8", "the command's answer is not UTF-8 text") from None
    if not text.strip():
        raise CommandFailed("empty answer", "the command printed nothing and wrote no answer file")
    return CommandAnswer(text, time.monotonic() - started)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
