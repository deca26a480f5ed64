"""Forward attention, shared by the built-in tasks `attention-fwd` (CUDA, bf16) and `attention-fwd-cpu`
(C with OpenMP, fp32): the problem shape, the kernel's arguments, the references and the sampled rows.

The two tasks share the ABI's meaning and scenario coverage (GQA, ragged and unequal lengths,
bottom-right causal masks, custom softmax scales, every head dim); the CPU one uses small shapes so
that the whole harness runs in seconds without a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import numpy as np

from evokernel.harness.task import Scalar, Task, Tensor

TRIAL_SCALE = (1.0, 1.0, 0.5)  # the third verification trial also varies softmax_scale
ROWS_CHECKED = 2  # query rows (of one head) compared on every timed call


@dataclass(frozen=True)
class Scenario:
    """One attention problem shape; softmax_scale None means 1/sqrt(head_dim)."""

    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool
    softmax_scale: float | None = None

    @property
    def name(self) -> str:
        heads = f"h{self.heads_q}" + (f"kv{self.heads_kv}" if self.heads_kv != self.heads_q else "")
        seq = f"s{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"q{self.seqlen_q}k{self.seqlen_k}"
        name = f"d{self.head_dim}-b{self.batch}-{heads}-{seq}" + ("-causal" if self.causal else "")
        return name + (f"-scale{self.softmax_scale:g}" if self.softmax_scale is not None else "")

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head `head` reads (grouped-query attention)."""
        return head // (self.heads_q // self.heads_kv)

    def visible_pairs(self) -> int:
        """Number of (query, key) pairs the mask lets through, per batch and head."""
        if not self.causal:
            return self.seqlen_q * self.seqlen_k
        offset = self.seqlen_k - self.seqlen_q
        return sum(max(0, min(self.seqlen_k, i + offset + 1)) for i in range(self.seqlen_q))


def attention_rows(q_rows: np.ndarray, k: np.ndarray, v: np.ndarray, rows: list[int], scenario: Scenario,
                   scale: float) -> np.ndarray:
    """float64 attention for query rows `rows` of one head: q_rows [R, D], k and v [Sk, D] (not copied when
    float64 already: a d256 head is 4 MB, copied twice a sampled check)."""
    scores = (np.asarray(q_rows, dtype=np.float64) @ np.asarray(k, dtype=np.float64).T) * scale
    if scenario.causal:
        limit = np.asarray(rows)[:, None] + (scenario.seqlen_k - scenario.seqlen_q)
        scores = np.where(np.arange(scenario.seqlen_k)[None, :] <= limit, scores, -np.inf)
    peak = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = weights.sum(axis=1, keepdims=True)
    return np.where(total > 0, (weights @ np.asarray(v, dtype=np.float64)) / np.where(total > 0, total, 1), 0)


class AttentionTask(Task):
    """Forward attention: o = softmax(scale * q k^T, masked) v per (batch, query head), layout
    [batch, seqlen, heads, head_dim], grouped-query heads, bottom-right causal mask."""

    entry = "evk_attention_fwd"
    scenario_type = Scenario

    def arguments(self, s: Scenario) -> list[Tensor | Scalar]:
        return [Tensor("q", (s.batch, s.seqlen_q, s.heads_q, s.head_dim), roll_axis=1),
                Tensor("k", (s.batch, s.seqlen_k, s.heads_kv, s.head_dim), roll_axis=1),
                Tensor("v", (s.batch, s.seqlen_k, s.heads_kv, s.head_dim), roll_axis=1),
                Tensor("o", (s.batch, s.seqlen_q, s.heads_q, s.head_dim), output=True),
                *(Scalar(name, "int", getattr(s, name)) for name in
                  ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim")),
                Scalar("causal", "int", int(s.causal)), Scalar("softmax_scale", "float", s.scale)]

    def traits(self, scenarios: list[Scenario]) -> frozenset[str]:
        """`attention` and `matrix-product`; `causal` and `grouped-query` where some scenario is."""
        return frozenset({"attention", "matrix-product"} | {"causal" for s in scenarios if s.causal}
                         | {"grouped-query" for s in scenarios if s.heads_kv < s.heads_q})

    def flops(self, s: Scenario) -> float:
        """Matrix FLOPs of QK^T and PV over the visible pairs (the figure FlashAttention reports)."""
        return 4.0 * s.batch * s.heads_q * s.head_dim * s.visible_pairs()

    def vary(self, s: Scenario, trial: int) -> Scenario:
        return dataclasses.replace(s, softmax_scale=s.scale * TRIAL_SCALE[trial % len(TRIAL_SCALE)])

    def sample(self, s: Scenario, rng: random.Random) -> dict[str, np.ndarray]:
        """Whole rows of one head: the rows of a head share their keys and values."""
        rows = sorted({rng.randrange(s.seqlen_q) for _ in range(ROWS_CHECKED)})
        b, h = rng.randrange(s.batch), rng.randrange(s.heads_q)
        starts = [((b * s.seqlen_q + row) * s.heads_q + h) * s.head_dim for row in rows]
        return {"o": np.concatenate([np.arange(start, start + s.head_dim) for start in starts]).astype(np.int64)}

    def reference_at(self, s: Scenario, picks: dict[str, np.ndarray], fetch) -> dict[str, np.ndarray]:
        b, _, h, _ = np.unravel_index(picks["o"][0], (s.batch, s.seqlen_q, s.heads_q, s.head_dim))
        rows = sorted({int(r) for r in np.unravel_index(picks["o"], (s.batch, s.seqlen_q, s.heads_q, s.head_dim))[1]})
        dims = np.arange(s.head_dim)

        def head(name: str, positions, heads: int, length: int, index: int) -> np.ndarray:
            flat = ((b * length + np.asarray(positions)[:, None]) * heads + index) * s.head_dim + dims[None, :]
            return fetch(name, flat.reshape(-1)).reshape(len(positions), s.head_dim)

        q = head("q", rows, s.heads_q, s.seqlen_q, h)
        keys = np.arange(s.seqlen_k)
        k = head("k", keys, s.heads_kv, s.seqlen_k, s.kv_head(h))
        v = head("v", keys, s.heads_kv, s.seqlen_k, s.kv_head(h))
        return {"o": attention_rows(q, k, v, rows, s, s.scale).reshape(-1)}


def numpy_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, s: Scenario, dtype) -> np.ndarray:
    """Plain attention in `dtype` (numpy); layout [batch, seqlen, heads, head_dim]; masked rows give zeros."""
    group = s.heads_q // s.heads_kv
    qt = q.astype(dtype).transpose(0, 2, 1, 3)  # b h s d
    kt = np.repeat(k.astype(dtype).transpose(0, 2, 1, 3), group, axis=1)
    vt = np.repeat(v.astype(dtype).transpose(0, 2, 1, 3), group, axis=1)
    scores = (qt @ kt.transpose(0, 1, 3, 2)) * dtype(s.scale)
    if s.causal:
        rows = np.arange(s.seqlen_q)[:, None] + (s.seqlen_k - s.seqlen_q)
        scores = np.where(np.arange(s.seqlen_k)[None, :] <= rows, scores, -np.inf)
    peak = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = weights.sum(axis=-1, keepdims=True)
    out = np.where(total > 0, (weights @ vt) / np.where(total > 0, total, 1), 0)
    return out.transpose(0, 2, 1, 3).astype(dtype)


REFERENCE_CHUNK_ELEMENTS = 1 << 29  # torch scores computed a few heads at a time (2 GiB of fp32)


def torch_reference(q, k, v, s: Scenario, precise: bool):
    """Attention in fp32 (`precise`) or plainly in bf16 (as FlashAttention's tests do) on torch tensors,
    as an fp32 tensor on their device; a few heads at a time to bound memory."""
    import torch

    device, dtype = q.device, torch.float32 if precise else torch.bfloat16
    group = s.heads_q // s.heads_kv
    out = torch.empty(q.shape, dtype=torch.float32, device=device)
    heads_per_chunk = max(1, min(s.heads_q, REFERENCE_CHUNK_ELEMENTS // (s.seqlen_q * s.seqlen_k)))
    mask = None
    if s.causal:
        rows = torch.arange(s.seqlen_q, device=device)[:, None] + (s.seqlen_k - s.seqlen_q)
        mask = torch.arange(s.seqlen_k, device=device)[None, :] <= rows
    for b in range(s.batch):
        for h0 in range(0, s.heads_q, heads_per_chunk):
            heads = torch.arange(h0, min(s.heads_q, h0 + heads_per_chunk), device=device)
            qd = q[b][:, heads].transpose(0, 1).to(dtype)  # h s d
            kd = k[b][:, heads // group].transpose(0, 1).to(dtype)
            vd = v[b][:, heads // group].transpose(0, 1).to(dtype)
            scores = (qd @ kd.transpose(1, 2)) * s.scale if precise else (qd * s.scale) @ kd.transpose(1, 2)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0).to(dtype)
            out[b][:, heads] = (weights @ vd).float().transpose(0, 1)
            del scores, weights
    return out
