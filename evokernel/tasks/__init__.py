"""Built-in tasks: each subdirectory holding a `task.py` is a task directory (see `evokernel.harness.task`);
`attention` is the code the two attention tasks share."""
