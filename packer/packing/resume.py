"""Whether an interrupted `packer pack` may be resumed, and if not, what changed:
the listing of the input, the options, or an input packed before the interruption."""

from pathlib import Path

from packer.errors import UsageProblem


def check_unchanged(source, setup: dict, progress: dict, work: Path) -> None:
    """Refuse to resume when the listing, the options or a packed input changed."""
    if progress["fingerprint"] != setup["fingerprint"]:
        changed = _what_changed(setup, progress)
        again = ("pass the earlier values to resume, or start over with --overwrite"
                 if changed.startswith("the options") else "start over with --overwrite")
        raise UsageProblem(f"{work}: {changed}; {again}")
    # The listing cannot tell an edited file; its modification time can.
    began = progress.get("started_ns")  # absent from an older version's progress
    modified = began and source.modified_since(began, progress["tally"]["next_input"])
    if modified:
        raise UsageProblem(f"{modified}: modified since the interrupted run began, after it "
                           "was packed; the input changed, start over with --overwrite")


def _what_changed(setup: dict, progress: dict) -> str:
    """`the options changed since the interrupted run (--max-count was 3, now 5)`, or
    the input (`18 samples then, 19 now`), or both; a progress file of an older
    version records neither, and gets `the input or the options changed ...`."""
    then_options, then_input = progress.get("options"), progress.get("input")
    changed, details = [], []
    if then_input and then_input["fingerprint"] != setup["input"]["fingerprint"]:
        then, now = then_input["samples"], setup["input"]["samples"]
        changed.append("the input")
        details.append(f"{then:,} samples then, {now:,} now" if then != now
                       else f"still {now:,} samples, not the same")
    differ = [f"--{name.replace('_', '-')} was {_option_value(then_options[name])}, "
              f"now {_option_value(value)}" for name, value in setup["options"].items()
              if then_options and name in then_options and then_options[name] != value]
    if differ:
        changed.append("the options")
        details += differ
    if not changed:
        return "the input or the options changed since the interrupted run"
    return f"{' and '.join(changed)} changed since the interrupted run ({'; '.join(details)})"


def _option_value(value) -> str:
    if value is None or value == []:
        return "not given"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return f"{value:,}" if isinstance(value, int) else str(value)
