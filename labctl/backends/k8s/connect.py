"""The edge to a cluster: found the way kubectl finds it (KUBECONFIG, ~/.kube/config with
--context, else the in-cluster config), asked once that it answers, and handed over as a
`Cluster` (api.py) whose every call is retried. The `kubernetes` package is imported only
here, inside `connect()`, so that `labctl --help` and `labctl render k8s` never pay for it."""
from __future__ import annotations

import os
import time
from pathlib import Path

from ...errors import LabError
from .api import CONNECT_RETRY_S, Cluster, api_client, failure_text, retry_call
from workloads._protocol import one_line

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def connect(context: str | None = None, namespace: str | None = None) -> Cluster:
    """Find the cluster the way kubectl does: KUBECONFIG, ~/.kube/config (with
    --context), else in-cluster config when running inside a pod."""
    try:
        import tenacity  # noqa: F401  (api.py retries every call with it)
        from kubernetes import client, config
    except ImportError as exc:
        raise LabError(f"the k8s backend needs the kubernetes Python client and tenacity ({exc}); "
                       "install them with: pip install 'labctl[k8s]'") from None
    hint = "set KUBECONFIG or --context"
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    has_kubeconfig = any(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p)
    try:
        if not has_kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            context = "in-cluster"
            if namespace is None and Path(SA_NAMESPACE_FILE).is_file():
                namespace = Path(SA_NAMESPACE_FILE).read_text().strip()
        elif not has_kubeconfig:
            raise LabError(f"no Kubernetes cluster reachable: no kubeconfig at {kubeconfig} and "
                           f"not running in a pod; {hint}")
        else:
            # KUBECONFIG is read now, not when `kubernetes` was imported; ':'-lists merge.
            config.load_kube_config(config_file=kubeconfig, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context is None:
                context = active.get("name")
            if namespace is None:
                chosen = next((c for c in contexts if c.get("name") == context), active)
                namespace = (chosen.get("context") or {}).get("namespace")
    except LabError:
        raise
    except Exception as exc:       # ConfigException, bad YAML, missing cert files ...
        raise LabError(f"no Kubernetes cluster reachable: {one_line(exc, 300)}; {hint}") from None
    api = api_client()
    version = client.VersionApi(api)
    try:                           # a busy or rolling server is waited for; a refusal is not
        retry_call("GET /version", lambda timeout: version.get_code(_request_timeout=timeout),
                   time.monotonic() + CONNECT_RETRY_S, connection_errors=False)
    except Exception as exc:       # connection refused, TLS, 401 ...
        host = api.configuration.host
        what = str(exc) if isinstance(exc, LabError) else failure_text(exc)
        raise LabError(f"no Kubernetes cluster reachable at {host} (context {context}): "
                       f"{one_line(what, 300)}; {hint}") from None
    return Cluster(client.CoreV1Api(api), client.BatchV1Api(api), client.NetworkingV1Api(api),
                   namespace or "default", context, custom=client.CustomObjectsApi(api))
