"""Thin Kubernetes adapters: the only place that talks to the API server; and `observe.py`,
the pure reading of its objects (plain JSON) into the planner's views, which every role shares."""
