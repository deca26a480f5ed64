"""One profile per backend: every backend module has its record, and nothing else asks which backend a task
has (a new device kind is its backend module and one record)."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import evokernel
from evokernel.harness import profile_of
from evokernel.harness import backends
from evokernel.harness.profiles import PROFILES

PACKAGE = Path(evokernel.__file__).parent


def test_every_backend_module_has_a_profile_and_every_profile_a_backend():
    modules = {module.name for module in pkgutil.iter_modules(backends.__path__)}
    assert modules == set(PROFILES)
    assert all(profile_of(name).name == name for name in modules)


def test_no_module_compares_a_backend_or_language_by_name():
    """Outside the backends, the profiles, the languages (compilers) and the source guard (per-language
    rules), no code tests `== "cuda"` or `== "cpu"`."""
    allowed = {"harness/profiles.py", "harness/languages.py", "harness/guard.py", "harness/object_imports.py",
               "source/lexer.py",
               "mutations/prompts.py"}
    pattern = re.compile(r"""[!=]= ["'](cuda|cpu)["']""")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             if str(path.relative_to(PACKAGE)) not in allowed and "backends" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
