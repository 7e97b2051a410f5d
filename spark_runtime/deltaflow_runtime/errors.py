"""The runtime's one error family. Each failure the runtime can name is a :class:`DeltaflowError`
carrying its reason (written to the termination message, which the operator turns into a
condition) and the exit code of the command; ``cli.main`` maps any of them in one clause.
Anything else is ``Failed`` (exit 1), which a restart may fix."""

from __future__ import annotations

from enum import IntEnum

from deltaflow_api.failures import FailureReason


class ExitCode(IntEnum):
    """The exit codes of ``deltaflow run|stream|optimize|vacuum|recover-checkpoint``."""

    DONE = 0
    FAILED = 1  # in a pod: restarted with backoff
    CONFIG = 2  # invalid manifest or arguments
    CHECKPOINT = 3  # checkpoint and table disagree: needs a decision
    DATA_LOSS = 4  # Kafka retention deleted records the stream had not read
    REFUSED = 5  # a command refused (an unsafe VACUUM retention, a checkpoint it cannot rebuild)


class DeltaflowError(Exception):
    """A failure the runtime names. Subclasses set ``reason`` and ``exit_code``; an instance may
    carry a more precise reason of its own."""

    reason: FailureReason = FailureReason.FAILED
    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, reason: FailureReason | str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = FailureReason(reason)

    @property
    def message(self) -> str:
        """What the user reads: on stderr and in the termination message."""
        return str(self)


class InvalidSpecError(DeltaflowError):
    """The spec cannot work (what admission could not see); the message names the field."""

    reason = FailureReason.INVALID_SPEC
    exit_code = ExitCode.CONFIG


def failure_reason(error: Exception) -> FailureReason:
    """The reason for an error that is no DeltaflowError: ``Failed``, unless it is Spark's
    wrapper around one a batch raised (its text names the class)."""
    if isinstance(error, DeltaflowError):
        return error.reason
    from deltaflow_runtime.sink import BATCH_ERRORS  # the sink raises them (and imports this)

    text = f"{type(error).__name__}: {error}"
    for batch_error in BATCH_ERRORS:
        if batch_error.__name__ in text:
            return batch_error.reason
    return FailureReason.FAILED
