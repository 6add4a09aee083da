"""Thin Kubernetes adapters: the only place that talks to the API server."""
