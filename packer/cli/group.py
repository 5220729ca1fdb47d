"""The click group class of packer's command lines (`packer`, and `train`, which uses
it through `packer.PackerGroup`): library errors become one-line messages."""

import click

from packer.errors import PackerError, UsageProblem


class PackerGroup(click.Group):
    """Turns library errors into one-line messages: exit 2 for usage, 1 otherwise."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageProblem as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(2)
        except PackerError as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("\nInterrupted. A pack can be continued with --resume.", err=True)
            ctx.exit(130)
