"""Errors that the CLI turns into one-line messages and exit codes."""


class BadInput(Exception):
    """Input the user must fix (file, task, option, config, run id): the CLI exits with code 2."""
