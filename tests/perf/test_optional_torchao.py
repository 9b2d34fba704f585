"""torchao is optional (the fp8 extra): without it an fp8 policy is unsupported on this machine, in one
line naming the extra, as any policy the device cannot run is (a sweep with skip_unsupported skips
it), and every other policy runs as before."""

import importlib.util

import pytest
from omegaconf import OmegaConf

from ablate.cli.common import _compose
from ablate.config import HardwareConfig, PrecisionConfig, build
from ablate.perf import resolve, unsupported_reason


def section(name: str, choice: str) -> dict:
    return OmegaConf.to_container(_compose("config", [f"{name}={choice}"])[name], resolve=True)


def policy(name: str) -> PrecisionConfig:
    return build(PrecisionConfig, section("precision", name), "precision")


@pytest.fixture
def without_torchao(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))


def test_without_torchao_the_fp8_policies_are_unsupported_in_one_line(without_torchao):
    hw = resolve(build(HardwareConfig, section("hardware", "cpu"), "hardware"))
    reason = unsupported_reason(hw, policy("fp8_tensorwise_emulated"))
    assert reason is not None and "\n" not in reason
    assert reason.startswith("precision=fp8_tensorwise_emulated needs torchao, which is not installed")
    assert "pip install 'ablate[fp8]'" in reason
    assert unsupported_reason(hw, policy("bf16")) is None


def test_with_torchao_the_emulated_fp8_policies_run_on_a_cpu():
    assert importlib.util.find_spec("torchao") is not None  # the lock installs the fp8 extra
    hw = resolve(build(HardwareConfig, section("hardware", "cpu"), "hardware"))
    assert unsupported_reason(hw, policy("fp8_rowwise_emulated")) is None
