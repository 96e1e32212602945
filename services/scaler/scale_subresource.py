"""The Kubernetes connector: a pool's size is the ``scale`` subresource of its Deployment, StatefulSet or LWS.

It reads and merge-patches ``/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/scale`` with
the official ``kubernetes`` client, and nothing else: the workload's pod template, rollout and
drain (``terminationGracePeriodSeconds`` and a ``preStop`` hook, ops/k8s) stay Kubernetes' job.
The same generic scale call serves all three kinds (apps/v1 has the same subresource path as a
custom resource), so the RBAC the scaler needs is exactly ``get`` and ``patch`` on
``deployments/scale``, ``statefulsets/scale`` and ``leaderworkersets/scale`` (ops/k8s/base/scaler-rbac.yaml,
checked by tests/unit/scaler/test_scale_subresource.py).

Auth: in a pod, the service account (``load_incluster_config``); elsewhere the kubeconfig given,
or the default one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from schemas.errors import BackendUnavailableError, ConfigError
from schemas.scaling import ConnectorKind, KubernetesTarget, ScaleTargetKind


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleResource:
    """Where a kind's scale subresource lives: API group, version and resource (plural)."""

    group: str
    version: str
    plural: str

    @property
    def rbac_resource(self) -> str:
        """The resource name an RBAC rule grants: ``deployments/scale``."""
        return f"{self.plural}/scale"


SCALE_RESOURCES: dict[ScaleTargetKind, ScaleResource] = {
    "Deployment": ScaleResource(group="apps", version="v1", plural="deployments"),
    "StatefulSet": ScaleResource(group="apps", version="v1", plural="statefulsets"),
    "LeaderWorkerSet": ScaleResource(group="leaderworkerset.x-k8s.io", version="v1", plural="leaderworkersets"),
}
SCALE_VERBS = ("get", "patch")


def scale_patch(replicas: int) -> dict[str, Any]:
    """The merge patch that sets a workload's replicas through its scale subresource (an ``autoscaling/v1`` Scale)."""
    return {"spec": {"replicas": replicas}}


def kubernetes_api(kubeconfig: Path | None) -> client.ApiClient:
    """An API client: the pod's service account in a cluster, else ``kubeconfig`` (or the default kubeconfig).

    Raises:
        ConfigError: neither an in-cluster service account nor a readable kubeconfig is there.
    """
    configuration = client.Configuration()
    try:
        if kubeconfig is None:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except ConfigException:
                config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=configuration
            )
    except (ConfigException, OSError) as exc:
        where = "the default kubeconfig" if kubeconfig is None else f"kubeconfig {kubeconfig}"
        msg = f"no Kubernetes credentials: not in a cluster, and {where} cannot be used ({exc})"
        raise ConfigError(msg) from exc
    return client.ApiClient(configuration)


class KubernetesScaleConnector:
    """Resizes one workload through its ``scale`` subresource."""

    def __init__(self, target: KubernetesTarget, api: client.ApiClient, *, timeout_s: float = 5.0) -> None:
        """Use ``api`` (``kubernetes_api``) for ``target``; every call waits at most ``timeout_s``."""
        self._target = target
        self._resource = SCALE_RESOURCES[target.kind]
        self._objects = client.CustomObjectsApi(api)
        self._timeout_s = timeout_s

    @property
    def kind(self) -> ConnectorKind:
        """``kubernetes``."""
        return "kubernetes"

    @property
    def target(self) -> str:
        """``Kind/namespace/name``."""
        return f"{self._target.kind}/{self._target.namespace}/{self._target.name}"

    @property
    def resource(self) -> ScaleResource:
        """The scale subresource it reads and patches (what its RBAC must grant)."""
        return self._resource

    def replicas(self) -> int | None:
        """``spec.replicas`` of the scale subresource (None when the workload leaves it unset)."""
        scale = self._call("get", None)
        spec = scale.get("spec") if isinstance(scale, dict) else None
        replicas = spec.get("replicas") if isinstance(spec, dict) else None
        return replicas if isinstance(replicas, int) else None

    def scale(self, replicas: int) -> str | None:
        """Merge-patch ``spec.replicas``; the workload's own drain (``preStop``) stops what leaves."""
        self._call("patch", scale_patch(replicas))
        return None

    def close(self) -> None:
        """Nothing to release: the pool's workloads outlive the scaler."""

    def _call(self, verb: str, body: dict[str, Any] | None) -> object:
        resource, target = self._resource, self._target
        try:
            if body is None:
                return self._objects.get_namespaced_custom_object_scale(
                    resource.group,
                    resource.version,
                    target.namespace,
                    resource.plural,
                    target.name,
                    _request_timeout=self._timeout_s,
                )
            return self._objects.patch_namespaced_custom_object_scale(
                resource.group,
                resource.version,
                target.namespace,
                resource.plural,
                target.name,
                body,
                _request_timeout=self._timeout_s,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            msg = f"{verb} {self.target}/scale: HTTP {exc.status} {exc.reason}"
            raise BackendUnavailableError(msg, backend="kubernetes") from exc
        except urllib3.exceptions.HTTPError as exc:
            msg = f"{verb} {self.target}/scale: {exc}"
            raise BackendUnavailableError(msg, backend="kubernetes") from exc
