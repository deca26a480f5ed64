"""CUDA backend: bf16 torch buffers on the harness's own stream, an fp32 reference, CUDA-event timing
with an L2 flush before every launch, a graph-capture audit for work done off the harness stream."""

from __future__ import annotations

import ctypes
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from evokernel.harness import values
from evokernel.harness.backends import (CANARY, GUARD_ELEMENTS, AttentionParams, Inputs, load_entry,
                                           shapes, tensor_seed)
from evokernel.harness.tasks import Scenario

FLUSH_BYTES = 256 << 20
# A device-side spin queued before the start event (as nvbench's blocking kernel does) so that the host
# has launched the timed call before the device reaches it: host-side call overhead (a ctypes call, a
# Python SDPA dispatch, slower on a host that sat idle behind a long kernel) is then not timed. The
# spin doubles whenever the device got there first, and that sample is taken again.
LAUNCH_SLACK_CYCLES = 100_000  # about 50 us
MAX_LAUNCH_SLACK_CYCLES = 1 << 25
REFERENCE_CHUNK_ELEMENTS = 1 << 29  # scores computed a few heads at a time (2 GiB of fp32)


def attention_reference(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention on the bf16 inputs, and the same computed plainly in bf16 (as FlashAttention's
    tests do), both as fp32 tensors on the inputs' device; a few heads at a time to bound memory."""
    s, device = inputs.scenario, inputs.q.device
    group = s.heads_q // s.heads_kv
    ref = torch.empty(inputs.o.shape, dtype=torch.float32, device=device)
    plain = torch.empty(inputs.o.shape, dtype=torch.float32, device=device)
    heads_per_chunk = max(1, min(s.heads_q, REFERENCE_CHUNK_ELEMENTS // (s.seqlen_q * s.seqlen_k)))
    mask = None
    if s.causal:
        rows = torch.arange(s.seqlen_q, device=device)[:, None] + (s.seqlen_k - s.seqlen_q)
        mask = torch.arange(s.seqlen_k, device=device)[None, :] <= rows
    for b in range(s.batch):
        for h0 in range(0, s.heads_q, heads_per_chunk):
            heads = torch.arange(h0, min(s.heads_q, h0 + heads_per_chunk), device=device)
            q = inputs.q[b][:, heads].transpose(0, 1)  # h s d
            k = inputs.k[b][:, heads // group].transpose(0, 1)
            v = inputs.v[b][:, heads // group].transpose(0, 1)
            for dtype, out in ((torch.float32, ref), (torch.bfloat16, plain)):
                qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
                scores = (qd * inputs.scale) @ kd.transpose(1, 2) if dtype == torch.bfloat16 else \
                    (qd @ kd.transpose(1, 2)) * inputs.scale
                if mask is not None:
                    scores = scores.masked_fill(~mask, float("-inf"))
                weights = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0).to(dtype)
                out[b][:, heads] = (weights @ vd).float().transpose(0, 1)
                del scores, weights
    return ref, plain


class LibraryBaseline:
    """PyTorch SDPA with one backend forced; supports only what SDPA's causal mask means (Sq == Sk)."""

    def __init__(self, name: str) -> None:
        from torch.nn.attention import SDPBackend

        self.name = name
        self.backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]
        self.prepared: dict[int, tuple] = {}

    def supports(self, inputs: Inputs) -> bool:
        s = inputs.scenario
        return not (s.causal and s.seqlen_q != s.seqlen_k)

    def __call__(self, inputs: Inputs) -> int:
        from torch.nn.attention import sdpa_kernel

        key = id(inputs)
        if key not in self.prepared:  # [b, s, h, d] -> [b, h, s, d], made once outside the timed region
            self.prepared = {key: tuple(t.transpose(1, 2).contiguous() for t in (inputs.q, inputs.k, inputs.v))}
        q, k, v = self.prepared[key]
        with sdpa_kernel([self.backend]):  # timed only (libraries are trusted), so the output is not copied back
            F.scaled_dot_product_attention(q, k, v, is_causal=inputs.scenario.causal, scale=inputs.scale,
                                           enable_gqa=inputs.scenario.heads_q != inputs.scenario.heads_kv)
        return 0


class KernelEntry:
    """A candidate's evk_attention_fwd, called on the harness stream."""

    def __init__(self, path) -> None:
        self.entry = load_entry(path, [ctypes.POINTER(AttentionParams), ctypes.c_void_p])

    def supports(self, inputs: Inputs) -> bool:
        return True

    def __call__(self, inputs: Inputs) -> int:
        params = inputs.params(lambda t: t.data_ptr())
        return self.entry(ctypes.byref(params), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


class Backend:
    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()  # the harness's stream: a non-default, non-blocking stream
        torch.cuda.set_stream(self.stream)
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self.driver = ctypes.CDLL("libcuda.so.1")
        self.slack_cycles = LAUNCH_SLACK_CYCLES

    def device_name(self) -> str:
        return torch.cuda.get_device_name()

    def load(self, path):
        return KernelEntry(path)

    def baseline(self, name: str):
        return LibraryBaseline(name)

    def supports(self, fn, inputs: Inputs) -> bool:
        return fn.supports(inputs)

    def _guarded(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """A bf16 buffer with canary bands before and after, and the tensor view between them."""
        size = math.prod(shape)
        buffer = torch.full((size + 2 * GUARD_ELEMENTS,), CANARY, dtype=torch.bfloat16, device="cuda")
        return buffer, buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + size].view(shape)

    def make_inputs(self, scenario: Scenario, seed: int, distribution: str, scale: float) -> Inputs:
        buffers, views = {}, {}
        for name, shape in shapes(scenario).items():
            buffers[name], views[name] = self._guarded(shape)
            if name == "o":
                views[name].fill_(float("nan"))
            else:
                index = torch.arange(math.prod(shape), dtype=torch.int64, device="cuda")
                drawn = values.draw(index, tensor_seed(seed, name), distribution, lambda x: x.to(torch.float32))
                views[name].copy_(drawn.view(shape))  # rounds to bf16 (nearest even), as the parent does
                del index, drawn
        return Inputs(scenario, scale, *views.values(), guarded=tuple(buffers.values()))

    def roll_inputs(self, inputs: Inputs, base: Inputs, offsets: tuple[int, int, int]) -> None:
        """New input values for a timed call: `base` rolled along the sequence (outside the timed region)."""
        for target, source, roll in zip((inputs.q, inputs.k, inputs.v), (base.q, base.k, base.v), offsets):
            target.copy_(torch.roll(source, roll, dims=1))

    def head_slices(self, inputs: Inputs, b: int, h: int, rows: list[int]) -> tuple[np.ndarray, ...]:
        """q rows, k and v of one head, and the candidate's output rows, as float32 host arrays."""
        kv_head = inputs.scenario.kv_head(h)
        parts = (inputs.q[b, rows, h], inputs.k[b, :, kv_head], inputs.v[b, :, kv_head], inputs.o[b, rows, h])
        return tuple(t.float().cpu().numpy() for t in parts)

    def guards_intact(self, inputs: Inputs) -> str | None:
        """Name of the first buffer whose guard bands changed (a write out of bounds), else None."""
        bands = torch.stack([torch.cat([b[:GUARD_ELEMENTS], b[-GUARD_ELEMENTS:]]) for b in inputs.guarded])
        broken = (bands != CANARY).any(dim=1).tolist()
        return next((name for name, bad in zip("qkvo", broken) if bad), None)

    def snapshot(self, inputs: Inputs) -> tuple:
        return tuple(t.clone() for t in (inputs.q, inputs.k, inputs.v))

    def unchanged(self, inputs: Inputs, snapshot: tuple) -> bool:
        return all(torch.equal(a, b) for a, b in zip((inputs.q, inputs.k, inputs.v), snapshot))

    def poison_output(self, inputs: Inputs) -> None:
        inputs.o.fill_(float("nan"))  # unwritten elements stay NaN

    def call(self, fn, inputs: Inputs) -> int:
        return fn(inputs)

    def run(self, fn, inputs: Inputs) -> tuple[int, torch.Tensor]:
        self.poison_output(inputs)
        rc = fn(inputs)
        self.stream.synchronize()  # only the harness stream: work elsewhere is not waited for
        torch.cuda.synchronize()  # surface asynchronous kernel faults here, inside this check
        return rc, inputs.o.float()  # a copy: later poisoning of the buffer does not reach it

    def time_call(self, fn, inputs: Inputs) -> float:
        while True:
            self.flush.zero_()  # evict the inputs from L2
            torch.cuda._sleep(self.slack_cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            fn(inputs)
            end.record(self.stream)
            queued_in_time = not start.query()  # the device was still spinning when the call was queued
            end.synchronize()
            if queued_in_time or self.slack_cycles >= MAX_LAUNCH_SLACK_CYCLES:
                return start.elapsed_time(end)
            self.slack_cycles *= 2

    def reference(self, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
        return attention_reference(inputs)

    # Comparisons stay on the device: a 16k-token output is 33M elements.
    def count_nonfinite(self, x: torch.Tensor) -> int:
        return int(x.numel() - torch.isfinite(x).sum().item())

    def max_abs_diff(self, a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max().item())

    def relative_error(self, out: torch.Tensor, ref: torch.Tensor) -> float:
        norm = torch.linalg.vector_norm(ref, dtype=torch.float64).item()
        return float(torch.linalg.vector_norm(out - ref, dtype=torch.float64).item() / max(norm, 1e-30))

    def audit(self, fn, inputs: Inputs) -> str | None:
        """Capture one call on the harness stream into a graph: work launched elsewhere leaves it empty."""
        graph, nodes = ctypes.c_void_p(), ctypes.c_size_t(0)
        handle = ctypes.c_void_p(self.stream.cuda_stream)
        torch.cuda.synchronize()
        if self.driver.cuStreamBeginCapture_v2(handle, 0) != 0:
            return None  # capture unavailable here: the timing cross-check below still applies
        rc = fn(inputs)
        status = self.driver.cuStreamEndCapture(handle, ctypes.byref(graph))
        torch.cuda.synchronize()
        if status != 0 or rc != 0:
            return f"launches work the harness cannot capture on its stream (capture status {status}, return {rc})"
        self.driver.cuGraphGetNodes(graph, None, ctypes.byref(nodes))
        self.driver.cuGraphDestroy(graph)
        if nodes.value == 0:
            return "launched no work on the harness's stream (side stream or default stream)"
        return self._wall_clock_audit(fn, inputs)

    def _wall_clock_audit(self, fn, inputs: Inputs) -> str | None:
        """Event time must account for the device work: the wait for a full device synchronisation after
        the call has returned (host-side overhead of the call itself excluded) may not exceed it."""
        event_ms = min(self.time_call(fn, inputs) for _ in range(3))
        wait_ms = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            fn(inputs)
            returned = time.perf_counter()
            torch.cuda.synchronize()
            wait_ms = min(wait_ms, (time.perf_counter() - returned) * 1e3)
        if wait_ms > 2.0 * event_ms + 0.5:
            return (f"work outside the harness stream: the device stayed busy {wait_ms:.3f} ms after the call "
                    f"returned, against {event_ms:.3f} ms on the stream")
        return None

    def release(self, inputs: Inputs) -> None:
        for buffer in inputs.guarded:
            buffer.fill_(float("nan"))  # a kernel that reads freed memory later reads NaN
        torch.cuda.synchronize()
