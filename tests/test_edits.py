"""Parsing LLM answers into child sources: full files, SEARCH/REPLACE edits, declared limits, failures."""

from __future__ import annotations

import pytest

from evokernel.mutations import ProposalFailed
from evokernel.mutations.edits import claims_limit, parse_answer

PARENT = """#include "evk.h"

int evk_run(const float* x, float* y, int n) {
    for (int i = 0; i < n; ++i) {
        y[i] = x[i] * 2.0f;
    }
    return 0;
}
"""


def test_full_file_in_a_fence_takes_the_largest_block():
    answer = ("The loop is bound by loads.\n```c\nint helper;\n```\nHere is the kernel:\n```cuda\n"
              "#include \"evk.h\"\nint evk_run(const float* x, float* y, int n) { return 1; }\n```\nDone explaining.")
    parsed = parse_answer(answer, PARENT)
    assert parsed.mode == "full"
    assert parsed.source == "#include \"evk.h\"\nint evk_run(const float* x, float* y, int n) { return 1; }\n"
    assert not parsed.declared_limit and "bound by loads" in parsed.prose and "evk_run" not in parsed.prose


def test_unclosed_fence_and_tilde_fence_are_read_to_the_end():
    assert parse_answer("~~~c\nint a = 1;\n~~~\n", PARENT).source == "int a = 1;\n"
    assert parse_answer("Kernel:\n```c\nint b = 2;\n", PARENT).source == "int b = 2;\n"


def test_search_replace_edits_apply_in_order_with_fences_and_whitespace_drift():
    answer = """Hypothesis: the multiply is cheap, the loop bound is not.
```diff
<<<<<<< SEARCH
  for (int i = 0; i < n; ++i) {   
      y[i] = x[i] * 2.0f;
=======
    for (int i = 0; i < n; i += 1) {
        y[i] = x[i] + x[i];
>>>>>>> REPLACE
```
<<<<<<<SEARCH
    return 0;
=======
    return n > 0 ? 0 : 1;
>>>>>>>REPLACE
"""
    parsed = parse_answer(answer, PARENT)
    assert parsed.mode == "edits"
    assert "    for (int i = 0; i < n; i += 1) {\n        y[i] = x[i] + x[i];\n    }\n" in parsed.source
    assert "return n > 0 ? 0 : 1;" in parsed.source and "* 2.0f" not in parsed.source
    assert parsed.source.startswith('#include "evk.h"\n') and parsed.source.endswith("}\n")
    assert "Hypothesis" in parsed.prose and "SEARCH" not in parsed.prose


def test_edit_whose_search_text_is_missing_fails_with_the_edit_number():
    answer = "<<<<<<< SEARCH\n    return 0;\n=======\n    return 1;\n>>>>>>> REPLACE\n" \
             "<<<<<<< SEARCH\n    y[i] = 3;\n=======\n    y[i] = 4;\n>>>>>>> REPLACE\n"
    with pytest.raises(ProposalFailed, match="edit 2: SEARCH text not found.*y\\[i\\] = 3"):
        parse_answer(answer, PARENT)


@pytest.mark.parametrize("answer", [None, "", "   \n", "I would look at the memory layout first."])
def test_empty_or_codeless_answers_fail(answer):
    with pytest.raises(ProposalFailed):
        parse_answer(answer, PARENT)


@pytest.mark.parametrize("answer", ["Change: none (the loop is already vectorised).",
                                    "This kernel is already optimal: it runs at the memory bandwidth."])
def test_an_answer_that_may_not_keep_its_parent_must_hold_code(answer):
    """A first kernel has no parent to keep: 'Change: none' there is an answer without a kernel, and its
    refusal does not suggest writing it."""
    with pytest.raises(ProposalFailed) as failure:
        parse_answer(answer, "", may_keep_parent=False)
    assert str(failure.value) == "no code block and no SEARCH/REPLACE edits in the answer"


def test_declared_limits_are_detected_from_prose_or_an_unchanged_kernel():
    no_code = parse_answer("This kernel is already optimal: it runs at the memory bandwidth.", PARENT)
    assert no_code.declared_limit and no_code.mode == "none" and no_code.source == PARENT
    same = parse_answer("```c\n" + PARENT.replace("    ", "  ") + "// same\n```", PARENT)
    assert same.declared_limit  # only whitespace and comments differ
    claim = parse_answer("It cannot be improved further, but here it is:\n```c\nint z;\n```", PARENT)
    assert claim.declared_limit
    # the refusal asks for `Change: none` and why: the why may follow on the same line (round 10 was refused so)
    for stated in ("Change: none", "1. The loads are coalesced already.\n2. **Change:** None.",
                   "Change: none \u2014 only a stream-K tail would help, too risky unverified",
                   "Change: None. The split is already even.", "Change: no change (every scenario has enough work)"):
        unchanged = parse_answer(stated, PARENT)
        assert unchanged.declared_limit and unchanged.mode == "none" and unchanged.source == PARENT
    for no_code in ("Change: unroll the loop (but no code given)", "Change: nothing but a wider tile",
                    "Change: nonetheless a wider tile"):
        with pytest.raises(ProposalFailed, match="says `Change: none` and why"):
            parse_answer(no_code, PARENT)
    assert not claims_limit("The limit is the shared memory per block; moving K to registers frees it.")
    assert claims_limit("No further optimization is possible.") and claims_limit("The work is done.")
