"""``reconciler demo``: merge-to-upgrade on a local control plane with a simulated 10-node GPU
fleet, from a fresh policy repository to the ``git log`` audit trail."""
