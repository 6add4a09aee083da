"""Project data shipped with the package: the vendor's ClusterOperator CRD and the object its chart
renders (``metax-operator-0.15.2/``, provenance in its ``SOURCE.md``)."""
