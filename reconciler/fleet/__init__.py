"""Many clusters in one repository
(docs/configuration.md#a-fleet-of-clusters-clustersname-windows-promotion): maintenance windows
and the promotion gate."""
