"""The Kubernetes backend: everything labctl knows of Kubernetes, in one package.

    settings.py     the lab's `k8s:` section and Kubernetes' name rules (label keys and
                    values, DNS subdomains, annotations), checked for every lab
    render.py       the pure renderer: Indexed Job + headless Service (+ ConfigMap,
                    NetworkPolicy) per lab
    jobset.py       the pure renderer of `k8s.kind: jobset`: one JobSet
    api.py          the API as a real server answers: retries, bytes, one-line failures
    scheduling.py   why a lab waits on the cluster (unschedulable pods, Kueue admission)
    connect.py      finding the cluster as kubectl does, asked once that it answers
    objects.py      the run's objects by its label: created, found, deleted
    status.py       what the pods and their Job (or JobSet) say now: outcomes, stuck, verdict
    collection.py   pod logs and events into the run folder, every item tried
    backend.py      K8sBackend: the verbs (apply, watch, collect, delete)

Only `api.py`, `connect.py`, `objects.py`, `status.py`, `collection.py` and `backend.py`
talk to a cluster, and the `kubernetes` client is imported only inside a call
(`api.api_client`, `connect.connect`): rendering and `labctl --help` never load it.
"""
