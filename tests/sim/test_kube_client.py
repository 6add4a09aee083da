"""The thin client layer (reconciler/kube) against the real API server: error mapping,
pagination, server-side apply, and list+watch (recovering from an expired watch, transforms)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.kube.api import Conflict, Forbidden, KubeApi, KubeError, NotFound, resource_path
from reconciler.kube.watch import ListWatch, without_managed_fields
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def namespace(kube: KubeApi, request: pytest.FixtureRequest) -> Any:
    name = request.node.name.replace("_", "-")[:50].lower()
    kube.create(resource_path("v1", "namespaces"), {"metadata": {"name": name}})
    yield name
    kube.delete(resource_path("v1", "namespaces", name))


def test_errors_are_mapped(control_plane: ControlPlane, kube: KubeApi, namespace: str) -> None:
    maps = resource_path("v1", "configmaps", namespace=namespace)
    with pytest.raises(NotFound):
        kube.get(f"{maps}/absent")
    assert kube.delete(f"{maps}/absent") is None  # missing_ok
    kube.create(maps, {"metadata": {"name": "one"}, "data": {"a": "1"}})
    with pytest.raises(Conflict) as exists:
        kube.create(maps, {"metadata": {"name": "one"}})
    assert exists.value.reason == "AlreadyExists"
    current = kube.get(f"{maps}/one")
    kube.replace(f"{maps}/one", {**current, "data": {"a": "2"}})
    with pytest.raises(Conflict):
        kube.replace(f"{maps}/one", {**current, "data": {"a": "3"}})
    with pytest.raises(KubeError) as invalid:
        kube.create(maps, {"metadata": {"name": "Bad_Name"}})
    assert invalid.value.status == 422
    nobody = KubeApi.from_kubeconfig(control_plane.mint_kubeconfig(None))
    try:
        with pytest.raises(Forbidden):
            nobody.get(f"{maps}/one")
    finally:
        nobody.close()


def test_list_follows_continue_tokens(kube: KubeApi, namespace: str) -> None:
    maps = resource_path("v1", "configmaps", namespace=namespace)
    for i in range(23):
        kube.create(maps, {"metadata": {"name": f"cm-{i:02d}"}})
    listed = kube.list(maps, query={"limit": 5})
    names = [m["metadata"]["name"] for m in listed["items"]]
    assert sorted(n for n in names if n.startswith("cm-")) == [
        f"cm-{i:02d}" for i in range(23)]


def test_server_side_apply_and_patch_types(kube: KubeApi, namespace: str) -> None:
    maps = resource_path("v1", "configmaps", namespace=namespace)
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": namespace}, "data": {"a": "1"}}
    kube.apply(f"{maps}/applied", body, field_manager="first")
    with pytest.raises(Conflict):  # another manager owns data.a
        kube.apply(f"{maps}/applied", {**body, "data": {"a": "2"}}, field_manager="second",
                   force=False)
    kube.patch(f"{maps}/applied", {"data": {"b": "2"}})
    kube.patch(f"{maps}/applied", [{"op": "add", "path": "/data/c", "value": "3"}],
               patch_type="json")
    assert kube.get(f"{maps}/applied")["data"] == {"a": "1", "b": "2", "c": "3"}


class ExpiringOnce(KubeApi):
    """The real client, except that its first watch ends the way an expired one does: an ERROR
    event carrying a 410 Status (what the API server sends when the resourceVersion is older
    than what it keeps, which a fresh test cluster cannot be made to produce on demand)."""

    def __init__(self, real: KubeApi) -> None:
        super().__init__(real.api_client)
        self.watches = 0

    def watch(self, path: str, **options: Any) -> Iterator[dict[str, Any]]:
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                "reason": "Expired", "message": "too old resource version: 1 (200)"}}
            return
        yield from super().watch(path, **options)


def test_list_watch_relists_after_an_expired_watch(kube: KubeApi, namespace: str) -> None:
    maps = resource_path("v1", "configmaps", namespace=namespace)
    kube.create(maps, {"metadata": {"name": "before"}})
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def record(event_type: str, obj: dict[str, Any]) -> None:
        with lock:
            seen.append((event_type, obj["metadata"]["name"]))

    api = ExpiringOnce(kube)
    watch = ListWatch(api, maps, on_event=record, name="expiry").start()
    try:
        wait_for(lambda: watch.lists >= 2 and api.watches >= 2, timeout=20,
                 what="a second list and watch after 410 Gone",
                 observe=lambda: (watch.lists, api.watches))
        kube.create(maps, {"metadata": {"name": "after"}})
        wait_for(lambda: ("ADDED", "after") in seen, timeout=20, what="the new object's event",
                 observe=lambda: seen)
        assert seen.count(("ADDED", "before")) == 1  # the relist found no difference for it
        assert {f"{namespace}/after", f"{namespace}/before"} <= set(watch.cache)
    finally:
        watch.stop()
    assert not watch.alive


def test_list_watch_transform_applies_to_listed_and_watched_objects(
    kube: KubeApi, namespace: str,
) -> None:
    maps = resource_path("v1", "configmaps", namespace=namespace)
    # with a field to own: an applied object that owns none carries no managedFields at all
    kube.apply(f"{maps}/listed", {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "listed"}, "data": {"k": "v"}},
               field_manager="test")
    assert kube.get(f"{maps}/listed")["metadata"].get("managedFields"), "the server keeps them"
    handed_out: list[dict[str, Any]] = []
    watch = ListWatch(kube, maps, on_event=lambda _, obj: handed_out.append(obj),
                      transform=without_managed_fields, name="transform").start()
    try:
        assert watch.wait_synced(20)
        kube.apply(f"{maps}/watched", {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "watched"}, "data": {"k": "v"}},
                   field_manager="test")
        assert kube.get(f"{maps}/watched")["metadata"].get("managedFields")
        wait_for(lambda: f"{namespace}/watched" in watch.cache, timeout=20,
                 what="the watched object", observe=lambda: list(watch.cache))
        # (the root CA publisher may add its kube-root-ca.crt to the namespace meanwhile)
        assert {"listed", "watched"} <= {obj["metadata"]["name"] for obj in handed_out}
        for obj in [*handed_out, *watch.cache.values()]:
            assert "managedFields" not in obj["metadata"], obj["metadata"]["name"]
            assert obj["metadata"]["resourceVersion"]  # the rest is as the server sent it
    finally:
        watch.stop()
