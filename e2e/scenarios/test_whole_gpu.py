"""Whole GPUs: two for one pod, and HAMi's use-gputype / use-gpuuuid / nouse-gputype as CEL selectors."""

from __future__ import annotations

import pytest

from dra_driver.vocabulary.names import Attr
from e2e.harness.examples import example, find
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import MIXED, apply, attribute, container, results, running

pytestmark = pytest.mark.e2e


def test_pod_with_two_whole_gpus(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, example("02-two-whole-gpus"))
    pod = running(bed, ns, "two-whole-gpus")
    allocated = results(bed, ns, pod, "gpus")
    devices = sorted(r["device"] for r in allocated)
    assert len(devices) == 2 and all(
        attribute(bed, pod["spec"]["nodeName"], d, Attr.TYPE) == "gpu" for d in devices
    )
    train = container(bed, ns, pod, "train")
    for device in devices:
        assert f"/dev/nvidia{device.removeprefix('gpu-')}" in train.device_paths()
    assert "/dev/nvidiactl" in train.device_paths()
    assert len(train.cdi_devices) == 2


def test_cel_selectors_pick_and_avoid_gpu_types(bed: SimCluster, ns: str) -> None:
    docs = example("01-gpu-type-selectors")
    apply(bed, ns, docs)
    h100 = running(bed, ns, "use-gputype")
    (r,) = results(bed, ns, h100, "gpu")
    assert str(attribute(bed, h100["spec"]["nodeName"], r["device"], Attr.PRODUCT_NAME)).startswith(
        "NVIDIA H100"
    )

    by_uuid = running(bed, ns, "use-gpuuuid")
    (r,) = results(bed, ns, by_uuid, "gpu")
    expression = find(docs, "ResourceClaimTemplate", "gpu-by-uuid")["spec"]["spec"]["devices"]["requests"][0]
    wanted = expression["exactly"]["selectors"][0]["cel"]["expression"].split('"')[-2]
    assert by_uuid["spec"]["nodeName"] == MIXED
    assert attribute(bed, MIXED, r["device"], Attr.UUID) == wanted

    avoid = running(bed, ns, "nouse-gputype")
    (r,) = results(bed, ns, avoid, "gpu")
    product = str(attribute(bed, avoid["spec"]["nodeName"], r["device"], Attr.PRODUCT_NAME))
    assert "A100" not in product and "H100" not in product, product
    assert product == "NVIDIA L4"
