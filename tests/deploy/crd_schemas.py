"""Trainer v2 and JobSet documents against their published API models, strictly.

The models are kubeflow-trainer-api's pydantic classes
(trainer.kubeflow.org/v1alpha1 TrainJob, TrainingRuntime,
ClusterTrainingRuntime; jobset.x-k8s.io/v1alpha2 JobSet). Pydantic ignores
unknown fields, so the document is first walked against the model classes:
every key must be a field alias of its model (through Optional, List and
Dict into nested models), every required field present. Then the model's
own validation (from_dict, strict types) must pass, and every replicated
job's Job template must validate strictly as a batch/v1 Job against the
pinned Kubernetes versions. Each kind's checker is proved strict in the
same run: mutated copies (an unknown nested field, a wrong type) must fail.
"""

import copy
import inspect
import typing

import pydantic
from kubeflow_trainer_api import models

from core_checks import schema_errors
import manifests as m
from report import name_of, rel

MODELS = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): models.JobsetV1alpha2JobSet,
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"):
        models.TrainerV1alpha1TrainJob,
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"):
        models.TrainerV1alpha1TrainingRuntime,
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"):
        models.TrainerV1alpha1ClusterTrainingRuntime,
}


def _unwrap(annotation):
    """('model', cls), ('list', item), ('dict', value) or ('leaf', None)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _unwrap(args[0])
    if origin is typing.Union:
        kept = [a for a in args if a is not type(None)]
        return _unwrap(kept[0]) if len(kept) == 1 else ("leaf", None)
    if origin is list:
        return "list", args[0]
    if origin is dict:
        return "dict", args[1]
    if inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel):
        # oneOf wrappers (IntOrString, Quantity) hold a scalar.
        if "actual_instance" in annotation.model_fields:
            return "leaf", None
        return "model", annotation
    return "leaf", None


def _join(path, key):
    return f"{path}.{key}" if path else key


def _walk(annotation, value, path):
    kind, inner = _unwrap(annotation)
    if value is None or kind == "leaf":
        return []
    if kind == "model":
        return unknown_fields(inner, value, path)
    if kind == "list" and isinstance(value, list):
        return [e for i, v in enumerate(value)
                for e in _walk(inner, v, f"{path}[{i}]")]
    if kind == "dict" and isinstance(value, dict):
        return [e for k, v in value.items() for e in _walk(inner, v, _join(path, k))]
    return []  # a wrong container type: the model's validation says so


def unknown_fields(cls, doc, path=""):
    """Every key of doc that is no field of cls (recursively), and every
    required field doc lacks, as 'path: why'."""
    if not isinstance(doc, dict):
        return [f"{path or '.'}: an object ({cls.__name__}) expected, "
                f"got {type(doc).__name__}"]
    fields = {(f.alias or n): f for n, f in cls.model_fields.items()}
    errors = []
    for key, value in doc.items():
        if key not in fields:
            errors.append(f"{_join(path, key)}: unknown field "
                          f"(not in {cls.__name__})")
        else:
            errors += _walk(fields[key].annotation, value, _join(path, key))
    for alias, f in fields.items():
        if f.is_required() and alias not in doc:
            errors.append(f"{_join(path, alias)}: required field missing")
    return errors


def replicated_jobs(doc):
    """The replicatedJobs of a JobSet or of a runtime's JobSet template."""
    spec = doc.get("spec") or {}
    if m.kind_of(doc) != "JobSet":
        spec = (spec.get("template") or {}).get("spec") or {}
    jobs = spec.get("replicatedJobs")
    return jobs if isinstance(jobs, list) else []


def job_template_errors(doc, versions):
    """Each replicated job's template as a batch/v1 Job, strictly."""
    errors = []
    for i, rj in enumerate(replicated_jobs(doc)):
        template = rj.get("template") if isinstance(rj, dict) else None
        if not isinstance(template, dict):
            continue
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": dict(template.get("metadata") or {},
                                name=str(rj.get("name", i))),
               "spec": template.get("spec")}
        for v in versions:
            errors += [f"replicatedJobs[{i}] as a Job: {e}"
                       for e in schema_errors(job, v)]
    return errors


def crd_errors(doc, versions):
    """Why doc is not a valid Trainer v2 / JobSet document ([] if it is)."""
    cls = MODELS.get((doc.get("apiVersion"), m.kind_of(doc)))
    if cls is None:
        return [f"no model for {doc.get('apiVersion')} {m.kind_of(doc)}"]
    errors = unknown_fields(cls, doc)
    try:
        cls.from_dict(doc)
    except (pydantic.ValidationError, ValueError, TypeError) as e:
        errors.append(f"{cls.__name__}: {' '.join(str(e).split())[:400]}")
    return errors + job_template_errors(doc, versions)


def _set(doc, path, value):
    """Sets doc[path] (a list of keys and indexes), creating dicts (and a
    one-item list where an index meets nothing)."""
    node = doc
    for key, after in zip(path[:-1], path[1:]):
        if isinstance(key, int):
            if not isinstance(node, list) or len(node) <= key:
                raise ValueError(f"no item {key} to mutate at {path}")
            node = node[key]
        else:
            node = node.setdefault(key, [{}] if isinstance(after, int) else {})
    node[path[-1]] = value


def mutations(doc):
    """(description, mutated copy, text the errors must contain) for one
    unknown nested field and one wrong type."""
    if m.kind_of(doc) == "TrainJob":
        unknown = ["spec", "runtimeRef", "bogus"]
        wrong = ["spec", "trainer", "numNodes"]
    else:
        prefix = ["spec"] if m.kind_of(doc) == "JobSet" else [
            "spec", "template", "spec"]
        last = len(replicated_jobs(doc)) - 1
        unknown = prefix + ["replicatedJobs", last, "template", "spec",
                            "podFailurePolicy", "rules", 0, "bogus"]
        wrong = prefix + ["replicatedJobs", 0, "replicas"]
    out = []
    for path, value in ((unknown, True), (wrong, "2")):
        mutated = copy.deepcopy(doc)
        _set(mutated, path, value)
        text = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)
        want = text.lstrip(".") if value is True else path[-1]
        what = "unknown field" if value is True else f"{path[-1]}: \"2\""
        out.append((f"{what} at {text.lstrip('.')}", mutated, want))
    return out


def prove_strict(report, doc, versions):
    """The checker rejects mutated copies of doc, naming what is wrong."""
    for what, mutated, want in mutations(doc):
        errors = crd_errors(mutated, versions)
        report.check(bool(errors) and any(want in e for e in errors),
                     f"{m.kind_of(doc)} checker rejects a copy with {what} "
                     f"(errors: {errors[:1] or 'none'})")


def check_crds(report, repo, docs, versions):
    proved = set()
    for path, doc in docs:
        kind = m.kind_of(doc)
        if kind not in {k for _, k in MODELS}:
            continue
        report.errors(crd_errors(doc, versions),
                      f"{rel(repo, path)} {kind}/{name_of(doc)}: valid against "
                      f"kubeflow-trainer-api's model (strict), job templates "
                      f"against Kubernetes {', '.join(versions)}")
        if kind not in proved:
            proved.add(kind)
            prove_strict(report, doc, versions)
    report.check(proved == {k for _, k in MODELS},
                 f"every Trainer v2 / JobSet kind is checked (found {sorted(proved)})")
