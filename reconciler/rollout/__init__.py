"""Rollout: the batched canary state machine of SPEC section 4, as a pure planner."""
