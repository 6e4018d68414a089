"""``polymap.runtime.timing`` without a GPU: a stand-in for CuPy's streams, events and
graphs, driven by a fake device clock, checks what a sample means (device time per run,
the host's enqueue time not counted), how many runs a sample holds, and the fallback when
the work cannot be captured. The same code on a real GPU runs in tests/test_gpu.py."""

from __future__ import annotations

import sys
import types

import pytest

from polymap.errors import ArgumentError, InternalError
from polymap.runtime.timing import MAX_RUNS_PER_SAMPLE, time_device


class FakeDevice:
    """A GPU and its host on one fake clock. The host spends ``host_gap_s`` to enqueue each
    piece of work (a graph: once for all its runs); the device runs work in order, as soon
    as it is enqueued and the work before it is done, each run taking ``kernel_s``; an event
    completes when the device reaches it."""

    def __init__(self, kernel_s: float, host_gap_s: float):
        self.kernel_s, self.host_gap_s = kernel_s, host_gap_s
        self.host = 0.0  # the host's clock
        self.free_at = 0.0  # when the device has done everything enqueued so far
        self.capturing: list | None = None

    def work(self, seconds: float) -> None:
        self.host += self.host_gap_s
        self.free_at = max(self.free_at, self.host) + seconds

    def enqueue(self, name: str) -> None:
        if self.capturing is not None:
            self.capturing.append(name)
        else:
            self.work(self.kernel_s)


def fake_cupy(device: FakeDevice, *, capture_fails: bool = False) -> types.ModuleType:
    class Event:
        def record(self, stream=None):
            device.free_at = max(device.free_at, device.host)
            self.at = device.free_at

        @property
        def done(self):
            return self.at <= device.host

        def synchronize(self):
            device.host = max(device.host, self.at)

    class Graph:
        def __init__(self, names):
            self.names = names

        def launch(self, stream=None):
            device.work(device.kernel_s * len(self.names))

    class Stream:
        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            device.host = max(device.host, device.free_at)

        def begin_capture(self):
            if capture_fails:
                raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
            device.capturing = []

        def end_capture(self):
            names, device.capturing = device.capturing, None
            return Graph(names)

    class RawKernel:  # the spin: keeps the device busy for its argument's nanoseconds
        def __init__(self, source, name):
            assert name == "polymap_spin" and "globaltimer" in source

        def __call__(self, grid, block, args):
            device.work(int(args[0]) * 1e-9)

    Stream.null = Stream()
    cuda = types.SimpleNamespace(
        Stream=Stream, Event=Event, get_elapsed_time=lambda a, b: (b.at - a.at) * 1e3
    )
    return types.SimpleNamespace(cuda=cuda, RawKernel=RawKernel)


@pytest.fixture
def device(monkeypatch):
    def make(kernel_s, host_gap_s, **kw):
        fake = FakeDevice(kernel_s, host_gap_s)
        monkeypatch.setitem(sys.modules, "cupy", fake_cupy(fake, **kw))
        return fake

    return make


def test_a_sample_is_device_time_per_run_without_the_hosts_gaps(device):
    fake = device(kernel_s=3e-6, host_gap_s=100e-6)
    timing = time_device(lambda: fake.enqueue("k"), repeat=5)
    assert timing.method == "graph" and timing.why_not_graph == ""
    # the estimate saw 103 us per run (the gap included), so a sample holds 2 ms / 103 us runs
    assert timing.runs_per_sample == 20
    # one graph launch's gap spread over its runs: 3 us + 100 us / 20, not 103 us
    assert timing.samples_s == pytest.approx((3e-6 + 100e-6 / 20,) * 5)


def test_long_runs_are_one_per_sample_and_short_ones_capped(device):
    fake = device(kernel_s=10e-3, host_gap_s=0.0)
    assert time_device(lambda: fake.enqueue("k"), repeat=2).runs_per_sample == 1
    fake = device(kernel_s=1e-9, host_gap_s=0.0)
    timing = time_device(lambda: fake.enqueue("k"), repeat=2)
    assert timing.runs_per_sample == MAX_RUNS_PER_SAMPLE
    assert timing.samples_s[0] == pytest.approx(1e-9)


def test_work_that_cannot_be_captured_is_queued_behind_a_spin(device):
    """cuBLAS's case: a 5 us kernel that takes the host 25 us to enqueue. Launched one by
    one, the device would idle 20 us of every 25; behind the spin it runs them back to back."""
    fake = device(kernel_s=5e-6, host_gap_s=25e-6, capture_fails=True)
    timing = time_device(lambda: fake.enqueue("k"), repeat=3)
    assert timing.method == "queued"
    assert "stream capture is currently unsupported" in timing.why_not_graph
    assert timing.runs_per_sample == 77  # the estimate saw 4 runs end 105 us after its start: the host's pace
    assert timing.samples_s == pytest.approx((5e-6,) * 3)


def test_a_queue_that_runs_dry_is_never_reported(device, monkeypatch):
    """If the spin ends before the host has queued the runs, the sample would be the host's
    time: the spin is lengthened, and where it never suffices the timing raises."""
    import polymap.runtime.timing as timing_module

    fake = device(kernel_s=5e-6, host_gap_s=25e-6, capture_fails=True)
    monkeypatch.setattr(timing_module, "MAX_SPIN_TRIES", 1)
    real_queued = timing_module._queued

    def short_spin(run, runs, stream):
        sample = real_queued(run, runs, stream)
        fake.host_gap_s = 1e-3  # the host slows down after the spin was sized
        return sample

    monkeypatch.setattr(timing_module, "_queued", short_spin)
    with pytest.raises(InternalError, match="could not enqueue"):
        time_device(lambda: fake.enqueue("k"), repeat=1)


def test_before_sample_runs_outside_the_timed_region(device):
    fake = device(kernel_s=1e-3, host_gap_s=0.0)
    resets = []

    def reset():
        resets.append(1)
        fake.work(5.0)  # a slow reset: it must not show in any sample

    timing = time_device(lambda: fake.enqueue("k"), repeat=4, before_sample=reset)
    assert len(resets) == 4
    assert max(timing.samples_s) == pytest.approx(1e-3)


def test_repeat_must_be_positive(device):
    device(kernel_s=1e-6, host_gap_s=0.0)
    with pytest.raises(ArgumentError, match="repeat must be >= 1"):
        time_device(lambda: None, repeat=0)


def test_the_callers_null_stream_work_is_finished_before_the_first_run(device):
    """The inputs' copies and the outputs' fills were enqueued on the null stream, which the
    timing's non-blocking stream does not wait for."""
    fake = device(kernel_s=1e-6, host_gap_s=0.0)
    import cupy  # the fake, installed by the fixture

    order = []
    cupy.cuda.Stream.null.synchronize = lambda: order.append("null synchronized")

    def run():
        order.append("run")
        fake.enqueue("k")

    time_device(run, repeat=1)
    assert order[0] == "null synchronized" and order.count("null synchronized") == 1


def test_kernel_time_takes_the_arrays_as_a_dict_for_an_input_named_repeat(monkeypatch):
    import numpy as np

    import polymap
    import polymap.runtime.gpu as gpu

    seen = {}
    monkeypatch.setattr(
        gpu, "time_gpu", lambda cuda, arrays, repeat: seen.update(arrays=arrays, repeat=repeat)
    )
    program = polymap.parse(
        "param N = 4\nin repeat: f32[N]\nout y: f32[N]\npar N i { y[i] = repeat[i] }", name="r"
    )
    kernel = polymap.compile(program)
    data = np.zeros(4, np.float32)
    kernel.time({"repeat": data}, repeat=3)
    assert seen["repeat"] == 3 and seen["arrays"]["repeat"] is data
    with pytest.raises(ArgumentError, match="kernel.time: y given twice"):
        kernel.time({"y": data}, y=data)
