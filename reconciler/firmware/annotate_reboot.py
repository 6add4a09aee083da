"""Reboot hook for the simulated fleet (and a template for real ones): asks for a reboot by
setting the node annotation ``gpu.metax-tech.com/reboot-requested=<token>``.

    python -m reconciler.firmware.annotate_reboot NODE

Uses ``$KUBECONFIG`` and the token in ``$FIRMWARE_REBOOT_TOKEN`` (the orchestrator sets both);
setting the same token twice asks for one reboot only. Exit 0 when the request is recorded, 1 on
an API error, 2 on bad usage.
"""

from __future__ import annotations

import os
import sys

from reconciler.names import REBOOT_REQUESTED_ANNOTATION


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m reconciler.firmware.annotate_reboot NODE", file=sys.stderr)
        return 2
    node = argv[0]
    token = os.environ.get("FIRMWARE_REBOOT_TOKEN")
    kubeconfig = os.environ.get("KUBECONFIG")
    if not token or not kubeconfig:
        print("annotate_reboot: FIRMWARE_REBOOT_TOKEN and KUBECONFIG must be set",
              file=sys.stderr)
        return 2
    from reconciler.kube.api import KubeApi, KubeError, resource_path

    api = KubeApi.from_kubeconfig(kubeconfig, pool_size=1)
    try:
        api.patch(resource_path("v1", "nodes", node),
                  {"metadata": {"annotations": {REBOOT_REQUESTED_ANNOTATION: token}}})
    except KubeError as exc:
        print(f"annotate_reboot: {exc}", file=sys.stderr)
        return 1
    finally:
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
