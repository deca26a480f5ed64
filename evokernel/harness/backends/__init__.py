"""Backends: how kernels of one kind are loaded, fed, run, timed and compared on one device.

Each backend module defines a class `Backend` with the methods the worker calls:
`load`, `baseline`, `supports`, `make_inputs`, `refill`, `snapshot`, `unchanged`, `run`, `call`,
`time_call`, `reference`, `audit`, `release`, `device_name`. A new device kind is one new file.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from evokernel.harness.tasks import Scenario


class AttentionParams(ctypes.Structure):
    """Mirror of evk_attention_params (both tasks share the layout; pointers are untyped here)."""

    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("causal", ctypes.c_int), ("softmax_scale", ctypes.c_float),
    ]


@dataclass
class Inputs:
    """One problem instance on the device: q, k, v, the output buffer and the scale to use."""

    scenario: Scenario
    scale: float
    q: Any
    k: Any
    v: Any
    o: Any

    def params(self, pointer_of) -> AttentionParams:
        s = self.scenario
        return AttentionParams(pointer_of(self.q), pointer_of(self.k), pointer_of(self.v), pointer_of(self.o),
                               s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k, s.head_dim,
                               int(s.causal), self.scale)


def load_entry(path, argtypes: list) -> ctypes._CFuncPtr:
    """Load `evk_attention_fwd` from a built shared object (a private handle per path)."""
    library = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    entry = library.evk_attention_fwd
    entry.argtypes = argtypes
    entry.restype = ctypes.c_int
    return entry
