"""The API server's client, as the node daemon, `tessera cleanup` and the admission webhook open it: from a
kubeconfig file, or the pod's service account."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_driver.vocabulary.errors import ConfigError


def api_client(kubeconfig: Path | None) -> Any:
    """A `kubernetes.client.ApiClient`; ConfigError naming --kubeconfig when the credentials do not load."""
    from kubernetes import client as k8s  # noqa: PLC0415 - commands without an API server never load it
    from kubernetes import config as k8s_config  # noqa: PLC0415

    configuration = k8s.Configuration()
    try:
        if kubeconfig is not None:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=configuration
            )
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (k8s_config.ConfigException, OSError) as e:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        raise ConfigError(f"cannot load API credentials from {where}: {e}; give --kubeconfig") from e
    return k8s.ApiClient(configuration)
