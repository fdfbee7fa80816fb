"""The Kubernetes manifests under ops/kubernetes, validated offline.

- Core kinds (Deployment, Service) against the Kubernetes OpenAPI schemas shipped by
  kubernetes-validate, strict (unknown fields rejected), for a pinned Kubernetes version.
- CRDs (KEDA ScaledObject, Istio VirtualService/DestinationRule, Prometheus Operator
  PodMonitor) with the pydantic models generated from their CRDs (cloudcoil-models-*).
  Those models ignore unknown fields, so each document must also survive a round trip
  unchanged: a misspelt field (perTryTimout) is dropped by the model and caught here.
- The contracts between the files: the ones ops/README.md explains (selectors that match,
  a mesh that never gives up before the exporter's budget, least-request balancing stated,
  retries only on connection failures (never on a 503 refusal or a 504 spent budget), no
  ejection for 503s, a retry budget, a scaler on the refused-load-aware signal with selectors, behavior and fallback).

Run from the repository root with the venv of .ci/ops/setup.sh:
`target/ops-venv/bin/python .ci/ops/check_manifests.py`. Ends with
"check_manifests: N passed, N failed".
"""

import pathlib
import re
import sys

import kubernetes_validate
import yaml
from cloudcoil.models.istio.networking.v1 import DestinationRule, VirtualService
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from cloudcoil.models.prometheus_operator.v1 import PodMonitor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))

from tally import Tally  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBERNETES_VERSION = "1.30.0"
CRD_MODELS = {
    ("keda.sh/v1alpha1", "ScaledObject"): ScaledObject,
    ("networking.istio.io/v1", "VirtualService"): VirtualService,
    ("networking.istio.io/v1", "DestinationRule"): DestinationRule,
    ("monitoring.coreos.com/v1", "PodMonitor"): PodMonitor,
}

TALLY = Tally("check_manifests")
check = TALLY.check


def dropped(original, dumped, path=""):
    """Paths present in `original` that the model did not keep (or changed)."""
    if isinstance(original, dict) and isinstance(dumped, dict):
        out = []
        for key, value in original.items():
            if key not in dumped:
                out.append(f"{path}.{key}")
            else:
                out += dropped(value, dumped[key], f"{path}.{key}")
        return out
    if isinstance(original, list) and isinstance(dumped, list) and len(original) == len(dumped):
        return [p for i, (a, b) in enumerate(zip(original, dumped)) for p in dropped(a, b, f"{path}[{i}]")]
    return [] if original == dumped else [f"{path} ({original!r} became {dumped!r})"]


def validate(doc, where):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRD_MODELS:
        try:
            model = CRD_MODELS[key].model_validate(doc)
        except Exception as err:  # pydantic.ValidationError
            return check(False, f"{where}: {err}")
        lost = dropped(doc, model.model_dump(by_alias=True, exclude_unset=True, mode="json"))
        return check(not lost, f"{where}: fields the {key[1]} schema does not have: {lost}")
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return check(True, where)
    except kubernetes_validate.ValidationError as err:
        return check(False, f"{where}: {err.message} at {list(err.path)}")
    except kubernetes_validate.SchemaNotFoundError:
        return check(False, f"{where}: no schema for {key}: add its model to CRD_MODELS")


def seconds(duration):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?", duration)
    if not m or not duration:
        raise ValueError(f"not a duration: {duration}")
    return int(m.group(1) or 0) * 60 + float(m.group(2) or 0) + int(m.group(3) or 0) / 1000


def arg(args, flag, default):
    return int(args[args.index(flag) + 1]) if flag in args else default


def recorded_names():
    names = set()
    for path in (ROOT / "ops" / "prometheus").glob("*.yaml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def contracts(docs):
    by_kind = {d["kind"]: d for d in docs}
    for kind in ("Deployment", "Service", "PodMonitor", "ScaledObject", "VirtualService", "DestinationRule"):
        if not check(kind in by_kind, f"ops/kubernetes has a {kind}"):
            return
    deploy, service, monitor = by_kind["Deployment"], by_kind["Service"], by_kind["PodMonitor"]
    scaled, virtual, dest = by_kind["ScaledObject"], by_kind["VirtualService"], by_kind["DestinationRule"]
    namespaces = {d["metadata"].get("namespace") for d in docs}
    check(len(namespaces) == 1 and None not in namespaces, f"every manifest names one namespace: {namespaces}")
    namespace = deploy["metadata"]["namespace"]

    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen_port = int(args[args.index("--listen") + 1].rsplit(":", 1)[1])
    check(listen_port in ports.values(), f"--listen port {listen_port} is a container port {ports}")
    check(deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), "Deployment selector matches its pods")
    check(service["spec"]["selector"].items() <= pod_labels.items(), "Service selects the exporter pods")
    check(service["spec"]["ports"][0]["targetPort"] in ports, "Service targets a named container port")
    for probe in ("livenessProbe", "readinessProbe"):
        check(container[probe]["httpGet"]["path"] == "/healthz", f"{probe} is /healthz (never touches the pool)")
    annotations = deploy["spec"]["template"]["metadata"].get("annotations", {})
    check("prometheus.io/scrape" not in annotations, "pods are scraped by the PodMonitor only (no second job)")

    # Budgets: the exporter answers before anyone upstream gives up.
    budget = arg(args, "--scrape-budget-ms", 30000) / 1000
    offset = arg(args, "--scrape-timeout-offset-ms", 500) / 1000
    workers = arg(args, "--workers", 2)

    # PodMonitor: selects the pods, names the job the KEDA query selects.
    check(monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), "PodMonitor selects the exporter pods")
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    check(endpoint["port"] in ports and endpoint.get("path", "/metrics") == "/metrics", "PodMonitor scrapes /metrics on a named port")
    timeout, interval = seconds(endpoint["scrapeTimeout"]), seconds(endpoint["interval"])
    check(offset < timeout <= interval, f"scrape offset {offset}s < scrapeTimeout {timeout}s <= interval {interval}s")
    job = pod_labels.get(monitor["spec"].get("jobLabel", ""), f"{namespace}/{monitor['metadata']['name']}")

    # Istio: Envoy never gives up on an attempt before the exporter's budget.
    route = virtual["spec"]["http"][0]
    retries = route["retries"]
    per_try, total = seconds(retries["perTryTimeout"]), seconds(route["timeout"])
    check(per_try >= budget + 1, f"perTryTimeout {per_try}s exceeds the exporter's budget {budget}s by 1 s or more")
    check(total >= per_try * (1 + retries["attempts"]), f"route timeout {total}s leaves every attempt its perTryTimeout")
    check(1 <= retries["attempts"] <= 2, f"retries are bounded ({retries['attempts']})")
    retry_on = set(retries["retryOn"].split(","))
    # .ci/ops/replicas.sh: retrying 503s on a saturated fleet adds load and serves no more;
    # a 504 is a spent budget whose walk goes on. `5xx`, `gateway-error` and
    # `retriable-status-codes` (Istio's default list holds 503) would retry them.
    never = {"503", "504", "5xx", "gateway-error", "retriable-status-codes"}
    check(not retry_on & never, f"no retry on a refusal (503) or a spent budget (504): {sorted(retry_on)}")
    check("connect-failure" in retry_on, "a replica that cannot be reached (restarting) is retried on another one")
    check(route["route"][0]["destination"]["host"] == service["metadata"]["name"] == dest["spec"]["host"], "mesh rules name the Service")
    policy = dest["spec"]["trafficPolicy"]
    check(policy.get("loadBalancer", {}).get("simple") == "LEAST_REQUEST", "least-request balancing, stated")
    max_retries = policy.get("connectionPool", {}).get("http", {}).get("maxRetries")
    check(max_retries is not None and 1 <= max_retries <= 10, f"the DestinationRule has a retry budget (maxRetries {max_retries})")
    outlier = policy.get("outlierDetection", {})
    check(outlier.get("consecutive5xxErrors") == 0, "outlier detection never ejects for 5xx (honest 503s)")
    check(outlier.get("consecutiveGatewayErrors", 0) == 0, "outlier detection never ejects for 502/503/504")
    check(outlier.get("splitExternalLocalOriginErrors") is True and outlier.get("consecutiveLocalOriginFailures", 0) > 0,
          "unreachable replicas (connect failures, resets) are still ejected")

    # KEDA: the refused-load-aware signal, selected, with behavior and fallback.
    spec = scaled["spec"]
    check(spec["scaleTargetRef"]["name"] == deploy["metadata"]["name"], "ScaledObject scales the Deployment")
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    check(low >= 2 and high > low, f"min {low} (two or more: a replica to retry on) < max {high}")
    check("cooldownPeriod" not in spec or low == 0, "cooldownPeriod only set where it acts (minReplicaCount 0)")
    fallback = spec.get("fallback", {})
    check(fallback.get("failureThreshold", 0) >= 1 and low <= fallback.get("replicas", -1) <= high, f"fallback within bounds: {fallback}")
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
    check({"scaleUp", "scaleDown"} <= behavior.keys(), "HPA behavior for scaling up and down")
    check(behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 0) >= 60, "scaling down waits a minute or more")
    (trigger,) = spec["triggers"]
    meta = trigger["metadata"]
    check(trigger["type"] == "prometheus" and trigger.get("metricType") == "AverageValue", "prometheus trigger, AverageValue (fallback needs it)")
    query = meta["query"]
    check(any(name in query for name in recorded_names()), f"the query reads a series recorded by ops/prometheus: {query}")
    check("loopguard_pool_demand_avg" not in query, "the query is not the demand gauge, blind to refused load")
    for label, value in (("namespace", namespace), ("job", job), ("pool", None)):
        m = re.search(rf'\b{label}="([^"]*)"', query)
        check(m and (value is None or m.group(1) == value), f"the query selects {label}={value or '...'}: {query}")
    threshold = float(meta["threshold"])
    check(0 < threshold <= workers, f"threshold {threshold} is at most the {workers} workers of a replica")
    check(meta.get("ignoreNullValues") == "false", "no data is an error (fallback), not zero load")
    return query


def main():
    docs = []
    for path in sorted((ROOT / "ops" / "kubernetes").glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is None:
                continue
            validate(doc, f"{path.relative_to(ROOT)}[{i}] {doc.get('kind')}/{doc.get('metadata', {}).get('name')}")
            docs.append(doc)
    print(f"validated {len(docs)} manifests (Kubernetes {KUBERNETES_VERSION} schemas, strict; CRD models)")
    try:
        query = contracts(docs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        query = check(False, f"a manifest lacks what the contracts read: {type(err).__name__}: {err}")
    if query:
        print(f"KEDA query: {query}")
    return TALLY.summary()


if __name__ == "__main__":
    sys.exit(main())
