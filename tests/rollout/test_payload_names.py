"""The vendor's payload names (values.yaml of the chart 0.15.2: ``metax/driver-image``, versions
such as ``3.2.1.12-amd64``) through the planner's image arithmetic: the payload a rollback
restores keeps the spelling of the spec, so Git and the cluster keep naming the same fields."""

from __future__ import annotations

from reconciler.policy.payload import Payload
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.model import DaemonSetView, RolloutSnapshot
from reconciler.rollout.rollback import previous_payload, split_image

VENDOR = {"name": "metax/driver-image", "registry": "release.daocloud.io",
          "version": "3.2.1.12-amd64", "pullPolicy": "IfNotPresent"}


def test_an_image_splits_at_the_name_the_spec_uses() -> None:
    image = "release.daocloud.io/metax/driver-image:3.2.1.12-amd64"
    assert split_image(image, "metax/driver-image") == (
        "release.daocloud.io", "metax/driver-image", "3.2.1.12-amd64")
    assert split_image(image, "driver-image") == (
        "release.daocloud.io/metax", "driver-image", "3.2.1.12-amd64")
    assert split_image(image) == ("release.daocloud.io/metax", "driver-image", "3.2.1.12-amd64")
    # a registry with a port, a name the image does not end with
    assert split_image("registry.local:5000/metax/driver-image:2.33.0.9-amd64",
                       "other/image") == ("registry.local:5000/metax", "driver-image",
                                          "2.33.0.9-amd64")
    assert split_image("metax/driver-image:1.0-amd64", "metax/driver-image") == (
        "", "metax/driver-image", "1.0-amd64")


def test_the_previous_payload_read_back_from_the_daemonset_keeps_the_vendors_name() -> None:
    """No recorded payload (a status lost): the one the fleet runs comes from the DaemonSet's
    image and keeps the spec's ``metax/driver-image``."""
    new = dict(VENDOR, version="3.3.0.1-amd64")
    snapshot = RolloutSnapshot(
        nodes={}, payload=new, policy=UpgradePolicy(),
        daemonset=DaemonSetView(current_revision="r1",
                                current_image=Payload.from_spec(VENDOR).image))
    before = previous_payload(snapshot)
    assert before == VENDOR
    assert Payload.from_spec(before).image == Payload.from_spec(VENDOR).image
