"""Rollout: the batched canary state machine of docs/rollout.md#the-state-machine, as a pure
planner."""
