"""``python -m reconciler.firmware``: the orchestrator alone (see reconciler/cli/firmware.py)."""

from reconciler.cli.firmware import firmware

if __name__ == "__main__":
    firmware()
