"""Kernel source text, before anything builds it: the lexer (code as the compiler's later phases see it),
the hashes that name and deduplicate sources, and knobs. The ground floor: it imports nothing else of
evokernel, so the store, the harness's guard, the search and the operators all read sources the same way.

Interface: `lex`, `without_comments`, `source_hash`, `normalized_hash`, `Knob`, `KnobError`, `parse_knobs`,
`knob_values`, `set_knobs`, `tunable`, `KNOB_HINT`, `each_has_its_own` (whether two kernels have code to combine) (the lexer's word-scan helpers are in `evokernel.source.lexer`).
"""

from evokernel.source.compare import each_has_its_own
from evokernel.source.hashes import normalized_hash, source_hash
from evokernel.source.knobs import KNOB_HINT, KNOB_LINE, Knob, KnobError, knob_values, parse_knobs, set_knobs, tunable
from evokernel.source.lexer import lex, without_comments

__all__ = ["KNOB_HINT", "KNOB_LINE", "Knob", "KnobError", "each_has_its_own", "knob_values", "lex", "normalized_hash", "parse_knobs",
           "set_knobs", "source_hash", "tunable", "without_comments"]
