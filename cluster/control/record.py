"""What a deployment created, recorded where every later driver finds it: Ray's GCS key-value store.

::

    raydex deploy ──► record.add(name, role, placement group id, bundle) ──► GCS KV
                                                                   "raydex" / "deployment:<ns>"
    raydex deploy (again), raydex status, raydex down, the monitor ◄── record.load(ns)

One record per deployment (a Ray namespace: ``raydex``, or ``raydex-loadtest-<pid>``), a JSON
document under the key ``deployment:<namespace>`` of the KV namespace ``raydex``. It lists every
actor the deployment created, with its role, replica group and index, and the placement group and
bundle (host, NUMA node, cores) it was given. The GCS holds it for as long as the cluster runs, so
it does not depend on the driver: a new ``raydex`` process, in whatever Ray namespace, reads it.

Why a record: Ray keys placement groups by name *per job namespace*, and each ``raydex`` command is
a new driver in an anonymous namespace, so a lookup by name from a later driver fails (that is how
groups leaked, issue 35). The record keeps each group's id, and every group is also named
``<namespace>:<actor>`` (:func:`group_name`) so that one created just before a driver died, not
yet recorded, is still found by its name in Ray's placement-group table (:func:`leftover_groups`).
``down`` removes exactly the recorded actors and groups, so a user's own actor in the namespace
survives; the bundles let the next deploy keep every running replica where it is.

Invariants: an actor is recorded before it is created (with its group's id once the group
exists), and forgotten once it is killed; writes replace the whole document (one KV put). Two
deploys of one namespace at once are not supported (the second overwrites the first's record).
Cost: one small GCS call per read or write; never on a data path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..bundle import BundlePlacement

__all__ = [
    "KV_NAMESPACE",
    "ActorEntry",
    "DeploymentRecord",
    "delete",
    "group_name",
    "leftover_groups",
    "load",
    "remove_group",
    "save",
]

#: the GCS key-value namespace holding every deployment's record
KV_NAMESPACE = "raydex"
_VERSION = 1


def _key(namespace: str) -> str:
    return f"deployment:{namespace}"


def group_name(namespace: str, actor: str) -> str:
    """The placement group of ``actor`` in deployment ``namespace``: unique across deployments
    on one cluster (a loadtest's actors have the production names, in another namespace)."""
    return f"{namespace}:{actor}"


@dataclass(frozen=True, slots=True)
class ActorEntry:
    """One actor a deployment created: its role (sequencer, snapshot, committer, replica,
    monitor), replica group and index, placement group id (hex; None without placement) and the
    bundle it was given (None without placement)."""

    role: str
    group: str = ""
    index: int = 0
    placement_group: str | None = None
    bundle: BundlePlacement | None = None

    @property
    def host(self) -> str | None:
        return self.bundle.host if self.bundle is not None else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.bundle is not None:
            out["bundle"] = {**asdict(self.bundle), "cpus": list(self.bundle.cpus)}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActorEntry:
        b = data.get("bundle")
        bundle = BundlePlacement(**{**b, "cpus": tuple(b["cpus"])}) if b else None
        return cls(
            str(data["role"]),
            str(data.get("group", "")),
            int(data.get("index", 0)),
            data.get("placement_group"),
            bundle,
        )


@dataclass(slots=True)
class DeploymentRecord:
    """A deployment's actors by name (see the module docstring)."""

    namespace: str
    actors: dict[str, ActorEntry] = field(default_factory=dict)

    def add(self, name: str, entry: ActorEntry) -> None:
        self.actors[name] = entry
        save(self)

    def set_group(self, name: str, group_id: str) -> None:
        self.actors[name] = replace(self.actors[name], placement_group=group_id)
        save(self)

    def forget(self, name: str) -> None:
        if self.actors.pop(name, None) is not None:
            save(self)

    def bundles(self) -> dict[tuple[str, int], BundlePlacement]:
        """(group, index) -> the bundle each placed actor was given (for ``placement_for``)."""
        return {
            (e.bundle.group, e.bundle.index): e.bundle
            for e in self.actors.values()
            if e.bundle is not None
        }

    def hosts(self) -> set[str]:
        return {h for e in self.actors.values() if (h := e.host) is not None}

    def as_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "namespace": self.namespace,
            "actors": {n: e.as_json() for n, e in sorted(self.actors.items())},
        }


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv


def load(namespace: str) -> DeploymentRecord | None:
    """The record of ``namespace``, None when there is none (never deployed, or ``down``).
    Needs a connected Ray (``ray.init``)."""
    raw = _kv()._internal_kv_get(_key(namespace), namespace=KV_NAMESPACE)
    if raw is None:
        return None
    data = json.loads(raw)
    actors = {n: ActorEntry.from_json(e) for n, e in data.get("actors", {}).items()}
    return DeploymentRecord(namespace, actors)


def save(record: DeploymentRecord) -> None:
    """Write ``record`` (one KV put); a record without actors is deleted instead."""
    if not record.actors:
        delete(record.namespace)
        return
    payload = json.dumps(record.as_json(), separators=(",", ":"))
    _kv()._internal_kv_put(_key(record.namespace), payload, overwrite=True, namespace=KV_NAMESPACE)


def delete(namespace: str) -> None:
    _kv()._internal_kv_del(_key(namespace), namespace=KV_NAMESPACE)


def leftover_groups(namespace: str) -> Iterator[tuple[str, str]]:
    """``(group id hex, name)`` of every placement group of deployment ``namespace`` that Ray
    has not removed, found by name in the cluster-wide table (whatever namespace created it)."""
    import ray

    prefix = group_name(namespace, "")
    for gid, g in ray.util.placement_group_table().items():
        if g.get("state") != "REMOVED" and str(g.get("name", "")).startswith(prefix):
            yield gid, str(g["name"])


def remove_group(group_id: str) -> bool:
    """Remove the placement group with this id (hex), whatever job or namespace created it;
    False when Ray no longer has it. Its actors die with it."""
    import ray
    from ray.util import remove_placement_group
    from ray.util.placement_group import PlacementGroup

    table = ray.util.placement_group_table()
    if table.get(group_id, {}).get("state", "REMOVED") == "REMOVED":
        return False
    remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id))))
    return True
