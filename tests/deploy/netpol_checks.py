"""deploy/k8s/namespace/networkpolicy.yaml admits exactly what a job needs.

For the pods of every JobSet target (jobset_targets.py): each pod is
selected by a policy; the ports admitted to it are exactly the ports its
containers declare; a server's grpc port is admitted from the job's
workers and admin pods only, every metrics port from admin pods only; and
no rule is unrestricted (every rule names ports and pod-label peers), but
one: all-reduce workers (label lockstep/sync: allreduce) admit every port
from each other (gloo's ports are ephemeral), and only they do.
"""

import os

import jobset_targets as jt
import jobset_render as jr
import manifests as m

NETPOL_FILE = os.path.join("deploy", "k8s", "namespace", "networkpolicy.yaml")
ADMIN = {"lockstep/role": "admin"}
# The cluster's Prometheus, the one peer outside the namespace: metrics only.
PROMETHEUS_PEER = {
    "namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
PROMETHEUS = {"(namespace monitoring) app.kubernetes.io/name": "prometheus"}
ALLREDUCE = {"lockstep/sync": "allreduce"}


def _peers_rule(selector, rule):
    """An all-ports rule among all-reduce workers: its pods and peers are
    the same all-reduce workers."""
    peers = rule.get("from") or []
    return (not rule.get("ports") and selector.get("lockstep/sync") ==
            ALLREDUCE["lockstep/sync"] and len(peers) == 1 and
            peers[0] == {"podSelector": {"matchLabels": selector}})


def _rule_open(rule, selector):
    """Why an ingress rule admits more than named pods, or None."""
    peers = rule.get("from") or []
    if _peers_rule(selector, rule):
        return None
    if not rule.get("ports"):
        return "no ports (all ports)"
    if not peers:
        return "no from (anyone)"
    for peer in peers:
        if peer == PROMETHEUS_PEER:
            continue
        if set(peer) != {"podSelector"} or not peer["podSelector"].get("matchLabels") \
                or set(peer["podSelector"]) != {"matchLabels"}:
            return f"peer {peer} is not a plain pod-label selector"
    return None


def check_policies(report, policies):
    for pol in policies:
        name = pol["metadata"]["name"]
        spec = pol["spec"]
        report.check(spec.get("policyTypes") == ["Ingress"] and
                     set(spec.get("podSelector", {})) == {"matchLabels"},
                     f"NetworkPolicy/{name}: an Ingress policy on pod labels")
        for i, rule in enumerate(spec.get("ingress", [])):
            why = _rule_open(rule, spec.get("podSelector", {}).get("matchLabels", {}))
            report.check(why is None, f"NetworkPolicy/{name} ingress[{i}]: "
                         f"restricted to named ports and pods ({why or 'yes'})")


def _admitted(policies, labels):
    """{port: [peer matchLabels]} the policies selecting labels admit."""
    out = {}
    for pol in policies:
        if not m.labels_match(pol["spec"]["podSelector"].get("matchLabels"), labels):
            continue
        for rule in pol["spec"].get("ingress", []):
            peers = [PROMETHEUS if p == PROMETHEUS_PEER else
                     p.get("podSelector", {}).get("matchLabels") or {}
                     for p in rule.get("from", [])]
            for port in rule.get("ports", []):
                out.setdefault(port.get("port"), []).extend(peers)
    return out


def _expected(t, pod, port_name):
    """The job's pods (host names) that must reach port_name; admin always."""
    if pod["replicatedJob"] == jt.PS_JOB and port_name == "grpc":
        return {p["hostname"] for p in t["pods"] if p["replicatedJob"] != jt.PS_JOB}
    return set()


def _check_pod(report, t, pod, policies):
    where = f"{t['what']} pod {pod['hostname']}"
    selected = [p for p in policies
                if m.labels_match(p["spec"]["podSelector"].get("matchLabels"),
                                  pod["labels"])]
    report.check(bool(selected), f"{where}: isolated by a NetworkPolicy")
    admitted = _admitted(policies, pod["labels"])
    # Trainer's torch policy declares its port in every trainer pod; no
    # Lockstep process listens there, so it stays closed.
    declared = {p["containerPort"]: p.get("name") for c in pod["containers"]
                for p in c.get("ports", [])
                if (p["containerPort"], p.get("name")) != (jr.TORCH_PORT, None)}
    report.check(bool(declared) and set(admitted) == set(declared),
                 f"{where}: admits exactly its declared ports {sorted(declared)} "
                 f"(admitted {sorted(admitted, key=str)})")
    for port, name in sorted(declared.items()):
        _check_port(report, where, t, port, name, admitted.get(port, []),
                    _expected(t, pod, name))


def _check_port(report, where, t, port, name, peers, want):
    reached = {p["hostname"] for p in t["pods"]
               if any(m.labels_match(s, p["labels"]) for s in peers)}
    metrics = name == "metrics"
    stray = [s for s in peers if s != ADMIN and (s != PROMETHEUS or not metrics)
             and not any(m.labels_match(s, p["labels"]) for p in t["pods"])]
    report.check(ADMIN in peers and reached == want and not stray and
                 (PROMETHEUS in peers) == metrics,
                 f"{where}: port {port} ({name}) from admin pods"
                 f"{', the Prometheus' if metrics else ''} and "
                 f"{sorted(want) or 'no job pod'} only (reached "
                 f"{sorted(reached)}, other peers {stray})")


def _check_peers(report, t, pod, policies):
    """An all-reduce worker reaches, and is reached by, exactly its job's
    other all-reduce workers on every port; no other pod is."""
    where = f"{t['what']} pod {pod['hostname']}"
    allreduce = m.labels_match(ALLREDUCE, pod["labels"])
    rules = [(p["spec"]["podSelector"]["matchLabels"], r) for p in policies
             if m.labels_match(p["spec"]["podSelector"].get("matchLabels"),
                               pod["labels"])
             for r in p["spec"].get("ingress", [])
             if _peers_rule(p["spec"]["podSelector"]["matchLabels"], r)]
    if not allreduce:
        report.check(not rules, f"{where}: no all-ports rule admits peers "
                     "(it is no all-reduce worker)")
        return
    workers = {p["hostname"] for p in t["pods"] if p["replicatedJob"] != jt.PS_JOB}
    reached = {p["hostname"] for p in t["pods"] for sel, _ in rules
               if m.labels_match(sel, p["labels"])}
    report.check(bool(rules) and reached == workers,
                 f"{where}: every port from the job's all-reduce workers "
                 f"{sorted(workers)} (reached {sorted(reached)})")


PODMONITOR_FILE = os.path.join("deploy", "k8s", "namespace", "podmonitor.yaml")
PODMONITOR_KEYS = {"spec": {"selector", "podMetricsEndpoints"},
                   "endpoint": {"port", "path", "interval"}}


def check_pod_monitor(report, repo, targets):
    """podmonitor.yaml: prometheus-operator's PodMonitor, only the fields
    this check knows, selecting every pod of every target, each of which
    declares the port it scrapes."""
    (pm,) = m.load_docs(os.path.join(repo, PODMONITOR_FILE))
    spec = pm.get("spec", {})
    endpoints = spec.get("podMetricsEndpoints", [])
    report.check(pm.get("apiVersion") == "monitoring.coreos.com/v1" and
                 m.kind_of(pm) == "PodMonitor" and
                 set(spec) <= PODMONITOR_KEYS["spec"] and endpoints and
                 all(set(e) <= PODMONITOR_KEYS["endpoint"] for e in endpoints),
                 f"{PODMONITOR_FILE}: a monitoring.coreos.com/v1 PodMonitor "
                 "of known fields")
    selector = spec.get("selector", {}).get("matchLabels", {})
    ports = {e.get("port") for e in endpoints}
    for t in targets:
        for pod in t["pods"]:
            declared = {p.get("name") for c in pod["containers"]
                        for p in c.get("ports", [])}
            report.check(m.labels_match(selector, pod["labels"]) and
                         ports <= declared,
                         f"{t['what']} pod {pod['hostname']}: the PodMonitor "
                         f"scrapes its port(s) {sorted(ports)}")


def check_network_policy(report, repo, targets):
    policies = m.load_docs(os.path.join(repo, NETPOL_FILE))
    if not report.check(all(m.kind_of(p) == "NetworkPolicy" for p in policies)
                        and policies, f"{NETPOL_FILE}: NetworkPolicies"):
        return
    check_policies(report, policies)
    for t in targets:
        for pod in t["pods"]:
            _check_pod(report, t, pod, policies)
            _check_peers(report, t, pod, policies)
    check_pod_monitor(report, repo, targets)
