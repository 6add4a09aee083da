"""Many clusters in one repository (SPEC 10): maintenance windows and the promotion gate."""
