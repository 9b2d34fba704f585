"""profiling.py: op counts (FLOPs, bytes), the profile of a few steps, and train.profile=true end to end."""

import json

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.config import ConfigError, ModelConfig
from ablate.model import accounting
from ablate.model.gpt import GPT
from ablate.perf import profiling, roofline
from ablate.run import train
from support import SMALL_DATA


def test_operator_table_flops_for_a_matmul_are_2mnk():
    M, K, N = 96, 40, 24
    a, b = torch.randn(M, K), torch.randn(K, N)
    profile, prof = profiling.profile_function(lambda: a @ b, steps=2)
    mm = next(r for r in profile.ops if r.name == "aten::mm")
    assert mm.flops == 2 * M * N * K
    assert mm.bytes == 4 * (M * K + K * N + M * N)  # A and B read once, C written once (fp32)
    assert mm.calls == 1
    assert mm.ms > 0 and 0 < mm.fraction <= 1
    assert mm.intensity == pytest.approx(2 * M * N * K / (4 * (M * K + K * N + M * N)))
    assert profile.steps == [1, 2] and profile.counted_step == 0


def test_bytes_moved_by_views_in_place_and_broadcast_ops():
    x = torch.randn(100)
    with profiling.counting() as c:
        x.add_(1.0)  # read and written in place
        x.view(10, 10)  # a view moves nothing
        torch.zeros_like(x)  # reads only x's shape
        x.expand(5, 100) + 1.0  # the expanded input spans x's 400 bytes; the output is 5 x 400
    counts = c.counts
    assert (counts["aten::add_"].bytes_read, counts["aten::add_"].bytes_written) == (400, 400)
    assert (counts["aten::view"].bytes_read, counts["aten::view"].bytes_written) == (0, 0)
    assert (counts["aten::zeros_like"].bytes_read, counts["aten::zeros_like"].bytes_written) == (0, 400)
    assert (counts["aten::add"].bytes_read, counts["aten::add"].bytes_written) == (400, 2000)


def _counted_training_flops(cfg: ModelConfig, batch: int = 2) -> int:
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size))
    with profiling.counting() as c:
        _, loss = model(x, x)
        loss.backward()
    return sum(v.flops for v in c.counts.values())


def test_counted_flops_match_the_accounting_with_manual_attention():
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=27, attention="manual")
    tokens = 2 * cfg.block_size
    assert _counted_training_flops(cfg) == accounting.flops_per_token(cfg) * tokens


def test_cpu_fused_attention_is_counted_with_its_recomputation():
    # torch's own counter skips the CPU flash kernel; ours counts its 2 forward and 5 backward
    # batched matmuls (the backward recomputes the scores): 14 L T d per token instead of 12.
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=27, attention="sdpa")
    tokens = 2 * cfg.block_size
    matmuls = 6 * accounting.params_matmul(cfg) * tokens
    attention = 14 * cfg.n_layer * cfg.block_size * cfg.n_embd * tokens
    assert _counted_training_flops(cfg) == matmuls + attention


def test_profiled_run_logs_trace_tables_and_roofline(run_config, tmp_path):
    cfg = run_config(
        tmp_path,
        tracking="mlflow",
        **{"train.steps": 8, "train.profile": True, "train.profile_start": 2, "train.profile_steps": 2},
    )
    result = train.run(cfg, tmp_path / "out")
    assert result.status == "finished"
    out = tmp_path / "out"
    trace = json.loads((out / "profile_trace.json").read_text())  # Chrome trace format, opens in Perfetto
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count("ablate.step") == 2
    assert {"ablate.forward", "ablate.backward", "ablate.optimizer", "ablate.data"} <= set(names)
    doc = json.loads((out / "profile.json").read_text())
    assert doc["schema"] == profiling.SCHEMA and doc["steps"] == [3, 4] and doc["counted_step"] == 2
    assert all(doc["phases"][p] > 0 for p in ("forward", "backward", "optimizer"))
    assert sum(doc["phases"].values()) == pytest.approx(doc["step_ms"], rel=1e-6)
    mm = next(o for o in doc["operators"] if o["name"] == "aten::mm")
    assert mm["flops"] > 0 and mm["bytes"] > 0
    # its label follows from its recorded rate: far below both roofs (a busy machine's cores, tiny
    # kernels) it waits on neither and is overhead; else the side of the ridge its intensity lies on
    ceil = doc["ceilings"]
    share = mm["flops_per_s"] / min(ceil["peak_flops"], mm["intensity"] * ceil["bandwidth"])
    side = "compute" if mm["intensity"] >= ceil["ridge"] else "memory"
    assert mm["bound"] == ("overhead" if share < roofline.NEAR_ROOF else side)
    assert doc["verdict"]["bound"] in ("compute", "memory", "overhead")
    assert doc["ceilings"]["ridge"] == pytest.approx(doc["ceilings"]["peak_flops"] / doc["ceilings"]["bandwidth"])
    assert "aten::mm" in (out / "profile.md").read_text()
    assert (out / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    client = MlflowClient(cfg.tracking.uri)
    logged = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert {"profile_trace.json", "profile.json", "profile.md", "roofline.png", "result.json"} <= logged
    metrics = client.get_run(result.mlflow_run_id).data.metrics
    assert metrics["profile/step_ms"] == pytest.approx(doc["step_ms"])
    assert metrics["profile/memory_bound_share"] == pytest.approx(doc["verdict"]["memory"])


def test_counted_step_flops_match_the_accounting_of_a_training_step(run_config, tmp_path):
    cfg = run_config(
        tmp_path,
        **{
            "train.steps": 4,
            "train.profile": True,
            "train.profile_start": 1,
            "train.profile_steps": 1,
            "model.attention": "manual",
        },
    )
    train.run(cfg, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "profile.json").read_text())
    p = train.prepare(cfg)
    tokens = cfg.train.batch_size * cfg.model.block_size
    assert doc["flops_per_step"] == accounting.flops_per_token(p.cfg.model) * tokens


def test_an_unprofiled_run_writes_no_profile(run_config, tmp_path):
    train.run(run_config(tmp_path, **{"train.steps": 3}), tmp_path / "out")
    assert not (tmp_path / "out" / "profile.json").exists()


def test_profile_window_must_fit_in_the_run(run_config, tmp_path):
    cfg = run_config(tmp_path, **{"train.steps": 5, "train.profile": True, "train.profile_start": 10})
    with pytest.raises(ConfigError, match=r"train.profile_start=10 .* needs 14 steps, this run has 5"):
        train.prepare(cfg)


def test_profile_with_compile_fails_fast(run_config, tmp_path):
    with pytest.raises(ConfigError, match="train.compile=false while profiling"):
        run_config(tmp_path, **{"train.profile": True, "train.compile": True})
    with pytest.raises(ConfigError, match="train.profile_start=-1"):
        run_config(tmp_path, **{"train.profile_start": -1})


@pytest.mark.slow
@pytest.mark.e2e
def test_profile_from_the_command_line(cli, workdir):
    proc = cli(
        [
            "model=nano",
            "tracking=none",
            "train.steps=6",
            "train.eval_interval=6",
            "train.progress=false",
            "train.profile=true",
            "train.profile_start=1",
            "train.profile_steps=2",
            "hydra.run.dir=run",
            *SMALL_DATA,
        ],
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((workdir / "run" / "profile.json").read_text())["steps"] == [2, 3]
    assert (workdir / "run" / "roofline.png").is_file()


def test_bad_profile_override_is_one_line(cli, workdir):
    proc = cli(["train.profile=true", "train.steps=5", "tracking=none"], cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: train.profile_start=10 with train.profile_steps=3 needs 14 steps, this run has 5 "
        "(valid: train.profile_start <= 1, or a longer run)"
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_matmul_on_the_gpu_is_timed_by_its_kernels():
    M, K, N = 2048, 1024, 512
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    profile, _ = profiling.profile_function(lambda: a @ b, steps=3, device="cuda")
    mm = next(r for r in profile.ops if r.name == "aten::mm")
    assert profile.timeline == "device"
    assert mm.flops == 2 * M * N * K
    assert mm.ms > 0
