"""Entry point of the ``reconciler`` command.

Subcommands are imported lazily, so ``reconciler validate`` in a pre-commit hook does not pay
for importing the Kubernetes client.
"""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" under reconciler.cli
SUBCOMMANDS: dict[str, str] = {
    "validate": "validate:validate",
    "simulate": "simulate:simulate",
    "plan": "plan:plan",
    "dev-cluster": "dev_cluster:dev_cluster",
    "run": "run:run",
    "firmware": "firmware:firmware",
    "status": "status:status",
    "demo": "demo:demo",
    "dashboard": "dashboard:dashboard",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(f"reconciler.cli.{module_name}")
        command = getattr(module, attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpu-gitops-reconciler", prog_name="reconciler")
def cli() -> None:
    """GitOps reconciler for GPU driver and firmware upgrades."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
