"""How GPU work is timed: the device's time per run, without the host's time to enqueue it.

CUDA events around one Python call measure whatever the GPU waited for, and a short kernel
waits for the host: the first GPU records of ``polymap bench --kernels`` (2026-11-24, H100)
timed a 256x256x32 matmul at 118 us because the launch's Python work (isl evaluating the
grid, argument packing) sat between the two events, and ``cupy.matmul`` at 36 us for the
same reason. So the work is first captured into a CUDA graph holding several back-to-back
runs, and one sample is the event time of one replay divided by the runs in it: the GPU
then never waits for Python. Where capture fails (an operation that cannot be captured),
the same back-to-back runs are enqueued from Python behind a spin kernel that keeps the GPU
busy until the host has queued them all ("queued"; cuBLAS through CuPy cannot be captured),
and a sample whose queue ran dry is not reported. The method is recorded with the samples.

Inputs are not evicted from the L2 cache between runs: a working set under the cache's
size is served from it, for polymap's kernels and their baselines alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from polymap.errors import ArgumentError

# A sample spans at least this much device time (fewer runs when one run is longer), so
# that the event resolution (about 0.5 us) and the graph launch's own cost stay under 1%.
SAMPLE_S = 2e-3
MAX_RUNS_PER_SAMPLE = 256


@dataclass(frozen=True, slots=True)
class Timing:
    samples_s: tuple[float, ...]  # seconds per run, one per sample
    runs_per_sample: int
    method: str  # "graph" (CUDA graph replay) or "queued" (enqueued from Python behind a spin)
    why_not_graph: str = ""  # the capture's error where the method is "queued"


def time_device(
    run: Callable[[], None],
    *,
    repeat: int = 20,
    warmup: int = 3,
    before_sample: Callable[[], None] | None = None,
) -> Timing:
    """Seconds per call of ``run`` on the GPU. ``run`` enqueues its work on CuPy's current
    stream and nothing else (no synchronization, no allocation); ``before_sample`` (say,
    re-zeroing outputs) runs outside the timed region before each sample."""
    import cupy

    if repeat < 1:
        raise ArgumentError(f"repeat must be >= 1, got {repeat}")
    # the caller's copies and fills went to the null stream, which a non-blocking stream does
    # not wait for: they finish first
    cupy.cuda.Stream.null.synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(max(warmup, 1)):  # module load and first-use costs stay out
            run()
        stream.synchronize()
        runs = _runs_per_sample(run, stream)
        sample, method, why_not = _graph(run, runs, stream)
        sample()  # untimed: the graph's upload and first launch
        samples = []
        for _ in range(repeat):
            if before_sample is not None:
                before_sample()
            samples.append(sample() / runs)
    return Timing(tuple(samples), runs, method, why_not)


def _events(stream, enqueue: Callable[[], None], before: Callable[[], None] | None = None):
    """The device seconds between two events around ``enqueue``'s work (``before``'s work,
    enqueued first, is not counted), and whether the first event had already been reached
    when the host finished enqueuing: then the device may have waited for the host."""
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    if before is not None:
        before()
    start.record(stream)
    enqueue()
    stop.record(stream)
    reached_early = start.done
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / 1e3, reached_early


def _repeated(run: Callable[[], None], times: int) -> Callable[[], None]:
    """``run`` enqueued ``times`` times, back to back."""

    def runs() -> None:
        for _ in range(times):
            run()

    return runs


def _runs_per_sample(run: Callable[[], None], stream) -> int:
    """Enough runs for a sample of about SAMPLE_S, from a first estimate of 4 runs. The
    estimate includes the host's launch time, so for runs shorter than their launch it is
    too long and a sample holds fewer runs than SAMPLE_S would ask (a graph replay of them
    still keeps the host out of the sample itself)."""
    seconds, _ = _events(stream, _repeated(run, 4))
    return max(1, min(MAX_RUNS_PER_SAMPLE, math.ceil(SAMPLE_S / max(seconds / 4, 1e-7))))


def _graph(run: Callable[[], None], runs: int, stream) -> tuple[Callable[[], float], str, str]:
    """A sample of ``runs`` back-to-back runs replayed from a CUDA graph; where the work
    cannot be captured, enqueued from Python behind a spin (``_queued``)."""
    try:
        stream.begin_capture()
        try:
            _repeated(run, runs)()
        finally:
            graph = stream.end_capture()
    except Exception as exc:  # noqa: BLE001 - any capture failure falls back, and says why
        stream.synchronize()
        return _queued(run, runs, stream), "queued", f"{type(exc).__name__}: {exc}"[:200]
    return (lambda: _events(stream, lambda: graph.launch(stream))[0]), "graph", ""


# A one-thread kernel that keeps the stream busy for a given time (the GPU's global timer,
# in nanoseconds), while the host enqueues the work to time behind it.
SPIN_SOURCE = r"""
extern "C" __global__ void polymap_spin(long long nanoseconds) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while ((long long)(now - start) < nanoseconds);
}
"""
MAX_SPIN_TRIES = 6


def _queued(run: Callable[[], None], runs: int, stream) -> Callable[[], float]:
    """Work that cannot be captured (cuBLAS through CuPy) is enqueued from Python behind a
    spin kernel: while the stream spins, the host fills it with ``runs`` runs, so the device
    runs them back to back. The spin lasts twice the host's time to enqueue them (doubled
    again whenever the start event was reached before the host had finished); a sample
    whose queue never filled raises, rather than reporting the host's time as the GPU's."""
    import time

    import cupy
    import numpy as np

    from polymap.errors import InternalError

    spin = cupy.RawKernel(SPIN_SOURCE, "polymap_spin")
    enqueue = _repeated(run, runs)
    began = time.perf_counter()
    enqueue()
    hold = [2 * (time.perf_counter() - began) + 1e-4]
    stream.synchronize()

    def sample() -> float:
        for _ in range(MAX_SPIN_TRIES):
            seconds, reached_early = _events(
                stream, enqueue, lambda: spin((1,), (1,), (np.int64(hold[0] * 1e9),))
            )
            if not reached_early:
                return seconds
            hold[0] *= 2
        raise InternalError(
            f"timing: the host could not enqueue {runs} runs within a {hold[0]:.3g} s spin; "
            "the device's time cannot be told from the host's"
        )

    return sample
