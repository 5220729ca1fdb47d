"""`train` run as a user runs it, in this process: the train tests' one way to call it."""

from click.testing import CliRunner

from train.cli import cli


def train(*args, expect=0) -> str:
    """The output of `train ARGS...`; the test fails unless it exits with `expect`."""
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result.output
