"""Many clusters in one repository (docs/configuration.md#maintenance-windows): maintenance windows
and the promotion gate."""
