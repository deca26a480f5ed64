"""`python -m evokernel.cli` runs the `evokernel` command."""

from evokernel.cli import main

main()
