"""How the worker words a failure: one line, a device fault as the device said it, with the step it happened in."""

from __future__ import annotations

CUDA_FAILURES = (("illegal memory access", "illegal memory access"), ("misaligned address", "misaligned address"),
                 ("illegal instruction", "illegal instruction"), ("unspecified launch failure", "launch failure"),
                 ("launch timed out", "launch timed out"), ("out of memory", "ran out of device memory"),
                 ("device-side assert", "device-side assert"))


def device_failure(text: str, scenario: str, step: str | None) -> str | None:
    """One line for a fault the device reported: "illegal memory access in d128-... (during timing of ...)"."""
    where = f" (during {step})" if step else ""
    for needle, words in CUDA_FAILURES:
        if needle in text.lower():
            return f"{words} in {scenario}{where}" if scenario else f"{words}{where}"
    return None


def readable_failure(exc: BaseException, scenario: str, step: str | None) -> str:
    """One line for a runtime failure: a device fault as `device_failure` says it, else the exception's."""
    text = str(exc)
    first = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
    return device_failure(text, scenario, step) or f"{type(exc).__name__}: {first}" + (f" (during {step})" if step else "")
