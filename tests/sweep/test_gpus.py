"""Every GPU of a box (sweep/launch/gpus.py): each slot of the process launcher owns its GPU(s), and
a job's process sees only its own (CUDA_VISIBLE_DEVICES, set before it touches CUDA). On a CPU the
GPUs are a list in CUDA_VISIBLE_DEVICES, as the launcher would read them on a GPU machine."""

import json

import pytest

from ablate.config import ConfigError, ProcessSettings
from ablate.sweep.launch.gpus import GpuSlots, gpu_slots, visible_gpus
from ablate.sweep.launch.process import resources
from support import SMALL_DATA


def test_the_visible_gpus_are_the_variable_when_it_is_set():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3, 5"}) == (["3", "5"], False)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ([], False)  # none: the jobs' env is left alone
    assert gpu_slots(None, 1, "auto", {"CUDA_VISIBLE_DEVICES": ""}) is None


def test_each_slot_holds_its_own_gpus_until_its_job_ends():
    slots = gpu_slots(None, 2, "cuda", {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4"})
    assert slots.slots == 2  # the fifth GPU makes no whole slot
    first, second = slots.take(), slots.take()
    assert (first, second) == (("0", "1"), ("2", "3")) and not slots.free
    slots.give_back(second)
    slots.give_back(first)
    assert slots.free == [("0", "1"), ("2", "3")]
    assert slots.environment(first) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert GpuSlots(["0", "1"], pci_order=True).environment(("1",))["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_one_job_per_gpu_by_default_and_never_more_than_the_slots():
    gpus = gpu_slots(["0", "1", "2", "3"], 1, "auto")
    assert resources(ProcessSettings(), n_jobs=10, cores=16, gpus=gpus).workers == 4
    assert resources(ProcessSettings(workers=8), n_jobs=10, cores=16, gpus=gpus).workers == 4
    assert resources(ProcessSettings(workers=2), n_jobs=10, cores=16, gpus=gpus).workers == 2
    assert resources(ProcessSettings(), n_jobs=3, cores=16, gpus=gpus).threads == 5
    assert resources(ProcessSettings(), n_jobs=10, cores=16).workers == 10  # no GPU: one per core


def test_a_cpu_sweep_on_a_gpu_machine_hands_out_no_gpu():
    assert gpu_slots(None, 1, "cpu", {"CUDA_VISIBLE_DEVICES": "0,1"}) is None


def test_bad_gpu_settings_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"gpus_per_job=3 is more than the 2 GPU\(s\)"):
        gpu_slots(["0", "1"], 3, "cuda")
    with pytest.raises(ConfigError, match="names a GPU twice"):
        gpu_slots(["0", "0"], 1, "cuda")
    with pytest.raises(ConfigError, match="gpus_per_job=0 is invalid"):
        ProcessSettings(gpus_per_job=0).validate()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_two_slot_parallel_sweep_gives_each_job_its_own_gpu(tmp_path, cli):
    """Two GPUs visible, two runs: two at once (one per GPU, without hydra.launcher.workers), each
    job's own process holding its GPU alone."""
    args = [
        "--multirun",
        "model=nano",
        *SMALL_DATA,
        "train.steps=3",
        "train.progress=false",
        "train.seed=0,1",
        "tracking=none",
        "hydra/launcher=parallel",
        "hydra.sweep.dir=sweep",
    ]
    done = cli(args, tmp_path, env={"CUDA_VISIBLE_DEVICES": "3,5"}, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    # A slot given back goes to the front of the free list (GpuSlots.give_back), so jobs run one
    # after the other would both have held GPU 3: the second held 5 because the first still held 3.
    # (Their training windows need not overlap: 3 steps can end before the other process starts.)
    seen = [json.loads((tmp_path / "sweep" / n / "usage.json").read_text())["cuda_visible_devices"] for n in "01"]
    assert sorted(seen) == ["3", "5"]


@pytest.mark.slow
def test_the_warm_worker_the_jobs_are_forked_from_never_initializes_cuda():
    """A CUDA context does not survive fork: the worker reports that it has none once it has
    imported torch, the project and everything a job needs."""
    from ablate.sweep.launch.pool import Pool

    pool = Pool(None).start()
    try:
        ready = pool.workers[0].ready()
        assert ready is not None and ready["cuda_initialized"] is False
        assert "torch" in ready["preloaded"]
    finally:
        pool.close()
