"""The in-cluster validating admission webhook (docs/admission.md): the API server asks before any
ClusterOperator change, and the answer comes from the very validation ``reconciler validate``
and the sync role run (``reconciler.policy``).

``review`` is the pure decision (AdmissionReview in, AdmissionReview out); ``server`` the HTTPS
listener; ``certificates`` issues the CA and serving certificate the dev cluster uses.
"""
