"""ops/k8s and the Kubernetes connector against the API schemas of a pinned Kubernetes (kubernetes-validate).

Built-in kinds are validated strictly (unknown fields refused) against Kubernetes 1.35's OpenAPI schemas as
shipped by the ``kubernetes-validate`` wheel; the ScaledObject against the openAPIV3Schema of KEDA's own CRD
(ops/k8s/schemas, vendored at v2.20.2) with unknown fields refused too. The connector's merge patch is
checked as the ``autoscaling/v1`` Scale it patches, and the scaler's Role as exactly the subresources the
connector calls.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from schemas.errors import BackendUnavailableError
from schemas.scaling import KubernetesTarget, ScalerConfig, ScaleTargetKind
from services.gateway.config import read_gateway_config
from services.scaler.external_scaler import POOL_METADATA_KEY
from services.scaler.scale_subresource import SCALE_RESOURCES, SCALE_VERBS, KubernetesScaleConnector, scale_patch

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "ops" / "k8s" / "base"
KEDA_CRD = ROOT / "ops" / "k8s" / "schemas" / "keda.sh_scaledobjects.yaml"
KUBERNETES_VERSION = "1.35.0"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) of every object in ops/k8s/base."""
    found = []
    for path in sorted(BASE.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    return found


def objects(kind: str) -> dict[str, dict[str, Any]]:
    """The objects of ``kind`` by name."""
    return {doc["metadata"]["name"]: doc for _, doc in manifests() if doc["kind"] == kind}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with unknown properties refused wherever it lists properties (a CRD's schema prunes them instead)."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if "properties" in node:
            node.setdefault("additionalProperties", False)
            stack += node["properties"].values()
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
    return schema


def scaled_object_schema() -> dict[str, Any]:
    crd = next(doc for doc in yaml.safe_load_all(KEDA_CRD.read_text()) if doc)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return strict(version["schema"]["openAPIV3Schema"])


BUILT_IN = [(name, doc) for name, doc in manifests() if doc["kind"] != "ScaledObject"]


class TestManifests:
    @pytest.mark.parametrize(
        ("file", "manifest"), BUILT_IN, ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in BUILT_IN]
    )
    def test_each_built_in_object_fits_the_pinned_api_schema(self, file: str, manifest: dict[str, Any]) -> None:
        assert kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True) == "1.35"

    def test_the_strict_check_refuses_a_misspelt_field(self) -> None:
        deployment = copy.deepcopy(objects("Deployment")["governor-scaler"])
        deployment["spec"]["template"]["spec"]["serviceAcountName"] = "governor-scaler"
        with pytest.raises(kubernetes_validate.ValidationError, match="serviceAcountName"):
            kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)

    def test_the_scaled_object_fits_kedas_crd_and_targets_the_short_pool(self) -> None:
        (scaled,) = objects("ScaledObject").values()
        jsonschema.validate(scaled, scaled_object_schema())
        target = scaled["spec"]["scaleTargetRef"]
        assert target["name"] in objects("Deployment")
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["type"] == "external"
        assert trigger["metadata"]["scalerAddress"] == "governor-scaler.governor.svc:9090"

    def test_the_crd_check_refuses_a_misspelt_field(self) -> None:
        scaled = copy.deepcopy(next(iter(objects("ScaledObject").values())))
        scaled["spec"]["maxReplicas"] = 4
        with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
            jsonschema.validate(scaled, scaled_object_schema())

    def test_kustomization_lists_every_manifest_file(self) -> None:
        kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
        files = {path.name for path in BASE.glob("*.yaml")} - {"kustomization.yaml"}
        assert sorted(kustomization["resources"]) == sorted(files)

    def test_services_scraped_by_prometheus_expose_the_annotated_port(self) -> None:
        for name, deployment in objects("Deployment").items():
            template = deployment["spec"]["template"]
            annotations = template["metadata"]["annotations"]
            ports = {port["containerPort"] for c in template["spec"]["containers"] for port in c["ports"]}
            assert annotations["prometheus.io/scrape"] == "true", name
            assert int(annotations["prometheus.io/port"]) in ports, name


class TestScalerWiring:
    def scaler_config(self) -> ScalerConfig:
        text = objects("ConfigMap")["governor-scaler"]["data"]["scaler.toml"]
        return ScalerConfig.model_validate(tomllib.loads(text))

    def test_the_keda_pool_of_the_scaled_object_is_a_keda_pool_of_the_scaler(self) -> None:
        config = self.scaler_config()
        (scaled,) = objects("ScaledObject").values()
        pool = config.pools[scaled["spec"]["triggers"][0]["metadata"][POOL_METADATA_KEY]]
        assert pool.connector == "keda"
        assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (
            pool.min_replicas,
            pool.max_replicas,
        )
        service = objects("Service")["governor-scaler"]
        assert [p["port"] for p in service["spec"]["ports"]] == [config.keda_port]

    def test_each_kubernetes_pool_names_a_workload_of_the_manifests(self) -> None:
        for pool in self.scaler_config().pools.values():
            if pool.kubernetes is not None:
                assert pool.kubernetes.name in objects(pool.kubernetes.kind)

    def test_the_gateway_file_is_one_the_gateway_reads(self, tmp_path: Path) -> None:
        path = tmp_path / "gateway.toml"
        path.write_text(objects("ConfigMap")["governor-gateway"]["data"]["gateway.toml"])
        config = read_gateway_config(path)
        assert sorted(upstream.pool for upstream in config.upstreams) == ["long", "short"]

    def test_the_scaler_runs_under_its_service_account_and_no_other_pod_gets_a_token(self) -> None:
        for name, deployment in objects("Deployment").items():
            spec = deployment["spec"]["template"]["spec"]
            if name == "governor-scaler":
                assert spec["serviceAccountName"] == "governor-scaler"
            else:
                assert spec["automountServiceAccountToken"] is False, name


class TestScaleSubresource:
    @pytest.mark.parametrize("replicas", [0, 1, 7])
    def test_the_patch_is_a_scale_object_of_the_api(self, replicas: int) -> None:
        patch = scale_patch(replicas)
        scale = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": "vllm-long", "namespace": "governor"},
            **patch,
        }
        assert kubernetes_validate.validate(scale, KUBERNETES_VERSION, strict=True) == "1.35"
        assert patch == {"spec": {"replicas": replicas}}

    def test_the_role_grants_exactly_get_and_patch_on_the_scale_subresources(self) -> None:
        granted = {
            (group, resource, verb)
            for rule in objects("Role")["governor-scaler"]["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        needed = {
            (resource.group, resource.rbac_resource, verb)
            for resource in SCALE_RESOURCES.values()
            for verb in SCALE_VERBS
        }
        assert granted == needed

    def test_the_role_is_bound_to_the_scalers_service_account(self) -> None:
        binding = objects("RoleBinding")["governor-scaler"]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "governor-scaler",
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "governor-scaler", "namespace": "governor"}]

    @pytest.mark.parametrize(
        ("kind", "path"),
        [
            ("Deployment", "/apis/apps/v1/namespaces/governor/deployments/vllm-long/scale"),
            ("StatefulSet", "/apis/apps/v1/namespaces/governor/statefulsets/vllm-long/scale"),
            (
                "LeaderWorkerSet",
                "/apis/leaderworkerset.x-k8s.io/v1/namespaces/governor/leaderworkersets/vllm-long/scale",
            ),
        ],
    )
    def test_each_kind_is_merge_patched_at_its_scale_subresource(self, kind: ScaleTargetKind, path: str) -> None:
        """The request the official client builds: PATCH of the kind's /scale, merge patch, the patch body."""
        api = RecordingApiClient()
        connector = KubernetesScaleConnector(KubernetesTarget(kind=kind, namespace="governor", name="vllm-long"), api)
        with pytest.raises(BackendUnavailableError, match=rf"patch {kind}/governor/vllm-long/scale: HTTP 403"):
            connector.scale(3)
        ((method, url, headers, body),) = api.requests
        assert (method, url.removeprefix(api.configuration.host)) == ("PATCH", path)
        assert headers["Content-Type"] == "application/merge-patch+json"
        sent = json.loads(body) if isinstance(body, str | bytes) else body
        assert sent == {"spec": {"replicas": 3}}


class RecordingApiClient(client.ApiClient):  # type: ignore[misc]
    """The official client up to the wire: it records each request and answers 403, as an API without the RBAC."""

    def __init__(self) -> None:
        super().__init__(client.Configuration(host="https://kubernetes.invalid"))
        self.requests: list[tuple[str, str, dict[str, str], object]] = []

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: object = None,
        post_params: object = None,
        _request_timeout: object = None,
    ) -> object:
        self.requests.append((method, url, dict(header_params or {}), body))
        raise ApiException(status=403, reason="Forbidden")
