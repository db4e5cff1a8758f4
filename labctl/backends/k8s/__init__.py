"""The Kubernetes backend: everything labctl knows of Kubernetes, in one package.

    settings.py     the lab's `k8s:` section and Kubernetes' name rules (label keys and
                    values, DNS subdomains, annotations), checked for every lab
    render.py       the pure renderer: Indexed Job + headless Service (+ ConfigMap,
                    NetworkPolicy) per lab
    jobset.py       the pure renderer of `k8s.kind: jobset`: one JobSet
    api.py          the API as a real server answers: retries, bytes, one-line failures
    scheduling.py   why a lab waits on the cluster (unschedulable pods, Kueue admission)
    backend.py      K8sBackend: apply, watch, collect, delete

Only `api.py` and `backend.py` talk to a cluster, and they import the `kubernetes`
client only inside a call: rendering and `labctl --help` never load it.
"""
