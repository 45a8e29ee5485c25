"""Spec sheets: every target validates, detection, and the mismatch error."""

import pytest
import yaml

from evoteam import hardware, resources


def test_all_targets_present_and_valid():
    assert hardware.available() == ["b200", "cpu", "h100", "h200", "mi350x"]
    for name in hardware.available():
        spec = hardware.load_spec(name)
        assert spec.name == name
        if spec.is_gpu:
            assert spec.multiprocessors and spec.peak_memory_bandwidth_tbs and spec.peak_bf16_dense_tflops
            assert spec.l2_mib and spec.memory_gib and spec.profiler
    assert hardware.load_spec("h100").arch_target == "sm_90"
    assert hardware.load_spec("b200").arch_target == "sm_100"
    assert hardware.load_spec("mi350x").arch_target == "gfx950"
    amd = hardware.load_spec("mi350x").container
    assert amd.devices == ["/dev/kfd", "/dev/dri"] and set(amd.group_add) == {"video", "render"}
    assert hardware.load_spec("h200").container.device_requests[0]["driver"] == "nvidia"
    assert hardware.load_spec("cpu").env["TRITON_INTERPRET"] == "1"
    assert hardware.load_spec("h200").bandwidth_ceiling_tbs == 4.23  # measured beats datasheet


@pytest.mark.parametrize(
    "change, message",
    [
        ({"vendor": "intel"}, "vendor='intel' is not one of nvidia, amd, cpu"),
        ({"peak_memory_bandwidth_tbs": -1}, "peak_memory_bandwidth_tbs must be a positive number"),
        ({"multiprocessors": "many"}, "multiprocessors must be a positive integer"),
        ({"colour": "green"}, "unknown field(s) colour"),
        ({"container": {"image": "x"}}, "container needs at least 'image' and 'dockerfile'"),
        ({"device_name_patterns": []}, "needs device_name_patterns"),
    ],
)
def test_bad_spec_sheets_are_rejected(change, message):
    data = yaml.safe_load((resources.hardware_dir() / "h200.yaml").read_text())
    data.update(change)
    with pytest.raises(hardware.HardwareError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hardware.parse_spec(data, "h200.yaml")


def test_missing_field_is_named():
    data = yaml.safe_load((resources.hardware_dir() / "h100.yaml").read_text())
    del data["l2_mib"]
    with pytest.raises(hardware.HardwareError, match="missing field.*l2_mib"):
        hardware.parse_spec(data, "h100.yaml")


def test_detection_by_device_name():
    assert hardware.detect(None) == "cpu"
    assert hardware.detect("NVIDIA H200") == "h200"
    assert hardware.detect("NVIDIA H100 80GB HBM3") == "h100"
    assert hardware.detect("NVIDIA B200") == "b200"
    assert hardware.detect("AMD Instinct MI350X gfx950") == "mi350x"
    with pytest.raises(hardware.HardwareError, match="matches no spec sheet"):
        hardware.detect("NVIDIA GeForce RTX 4090")


def test_resolve_checks_the_local_device():
    assert hardware.resolve("auto", device_name="NVIDIA H200").name == "h200"
    assert hardware.resolve("h200", device_name="NVIDIA H200").name == "h200"
    assert hardware.resolve("cpu", device_name="NVIDIA H200").name == "cpu"
    with pytest.raises(hardware.HardwareError, match=r"hardware=mi350x does not match this machine \(NVIDIA H200"):
        hardware.resolve("mi350x", device_name="NVIDIA H200")
    with pytest.raises(hardware.HardwareError, match=r"\(no GPU, target cpu\)"):
        hardware.resolve("h100", device_name=None)
    # Sent to a container or host that has it: no local match needed.
    assert hardware.resolve("mi350x", remote=True, device_name=None).name == "mi350x"
    with pytest.raises(hardware.HardwareError, match="unknown hardware target 'tpu'"):
        hardware.resolve("tpu", device_name=None)
