"""evokernel: evolve fast GPU kernels with a correctness-gated, cheat-resistant harness."""

__version__ = "0.1.0"
