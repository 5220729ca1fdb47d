"""The click group class of packer's command lines (`packer`, and `train`, which uses
it through `packer.PackerGroup`): library errors become one-line messages."""

import errno

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
        except OSError as err:
            if not err.filename:
                raise  # not a file the user named or can fix: a bug to report whole
            click.echo(f"Error: {err.filename}: {err.strerror}{_HINTS.get(err.errno, '')}",
                       err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("\nInterrupted. A pack can be continued with --resume.", err=True)
            ctx.exit(130)


_HINTS = {  # what a user can do about a file system error on a path
    errno.EROFS: "; give a path on a file system you can write to",
    errno.EACCES: "; give a path you may read (or write, for an output)",
    errno.ENOSPC: "; free some space and run it again",
    errno.EDQUOT: "; free some space and run it again",
}
