"""The wire names and field numbers the kubelet depends on: a rename here breaks every node silently."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor

from kubelet_plugin.proto.gen import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1_pb2,
    health_v1alpha1_pb2,
    pluginregistration_pb2,
)


def fields(message: Descriptor) -> dict[str, int]:
    return {f.name: f.number for f in message.fields}


def test_service_full_names() -> None:
    assert pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == (
        "pluginregistration.Registration"
    )
    assert (
        dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
        == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert dra_v1beta1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
    )
    assert health_v1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == "v1.DRAResourceHealth"
    assert health_v1alpha1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == (
        "v1alpha1.DRAResourceHealth"
    )


def test_registration_messages() -> None:
    assert fields(pluginregistration_pb2.PluginInfo.DESCRIPTOR) == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert fields(pluginregistration_pb2.RegistrationStatus.DESCRIPTOR) == {
        "plugin_registered": 1,
        "error": 2,
    }


def test_dra_messages() -> None:
    device = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    assert fields(dra_v1_pb2.Device.DESCRIPTOR) == {**device, "share_id": 5}
    assert fields(dra_v1beta1_pb2.Device.DESCRIPTOR) == device
    for pb in (dra_v1_pb2, dra_v1beta1_pb2):
        assert fields(pb.Claim.DESCRIPTOR) == {"namespace": 1, "uid": 2, "name": 3}
        assert fields(pb.NodePrepareResourceResponse.DESCRIPTOR) == {"devices": 1, "error": 2}
        assert fields(pb.NodeUnprepareResourceResponse.DESCRIPTOR) == {"error": 1}
        assert fields(pb.NodePrepareResourcesResponse.DESCRIPTOR) == {"claims": 1}
        assert (
            pb.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"]
            .message_type.GetOptions()
            .map_entry
        )


def test_health_messages() -> None:
    base = {"device": 1, "health": 2, "last_updated_time": 3}
    assert fields(health_v1_pb2.DeviceHealth.DESCRIPTOR) == {
        **base,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    assert fields(health_v1alpha1_pb2.DeviceHealth.DESCRIPTOR) == base
    for pb in (health_v1_pb2, health_v1alpha1_pb2):
        assert fields(pb.DeviceIdentifier.DESCRIPTOR) == {"pool_name": 1, "device_name": 2}
        assert dict(pb.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
