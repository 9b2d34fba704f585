"""How fast and how big: hardware figures, memory, the decode bound, the roofline, profiling.

hardware.py   resolve a HardwareConfig to this machine's device and peaks (Hardware), measured CPU peak
clock.py      DeviceClock, Timing: training time from synchronization points, the warm-up apart
peak.py       the CPU's per-core peak FLOP/s, measured so that a busy machine cannot fool it
support.py    unsupported_reason: whether a device can run a precision policy (torch-free; one rule)
memory.py     bytes per GPU: weights, gradients, optimizer states, activations (torch-free)
decode.py     the memory-bandwidth bound on generation speed (torch-free)
fp8.py        where torchao's float8 starts to pay on a GPU, from benchmarks/bench_gpu.py's results
profiling.py  torch.profiler captures of a few steps, as FLOPs and bytes per operator
trace_log.py  kineto_quiet: the profiler's Kineto log lines kept off the console
recorded_speed.py  recorded_speeds: the training speeds earlier runs measured on this machine
roofline.py   operators placed against the compute and bandwidth ceilings; the CPU bandwidth benchmark
capture.py    RunCapture: profiling and the roofline inside a training run (train.profile=true)
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "hardware": (
            "Hardware",
            "available_devices",
            "available_memory",
            "measured_cpu_peak_flops",
            "resolve",
            "unsupported_reason",
        ),
        "clock": ("DeviceClock", "IntervalTimer", "Timing"),
        "memory": ("gpu_memory",),
        "roofline": ("measured_cpu_bandwidth",),
        "capture": ("RunCapture",),
        "recorded_speed": ("Speed", "nearest_in_length", "recorded_speeds", "this_gpu"),
    },
    modules=("support", "memory", "decode", "fp8", "profiling", "roofline", "trace_log"),
)
