"""Built-in tasks: each subdirectory holding a `task.py` is a task directory (see `evokernel.harness.task`);
`attention` is the code the two attention tasks share. A task's hand-written seed kernels (beside its
original) live in its `seeds/` folder: `ATTENTION_SEEDS` holds the CUDA attention task's (the FA2-style
mma.sync kernel the default GPU config starts from, and the Hopper wgmma kernel)."""

from pathlib import Path

ATTENTION_SEEDS = Path(__file__).resolve().parent / "attention_fwd" / "seeds"
