"""The exception every Lockstep call raises, and the exit codes it maps to.

A failed call into the C++ client arrives as LockstepError carrying the
gRPC status code and the server's message. Its exit_code follows
docs/faults.md: 75 (retryable) for a lost server or peer or a timeout, 2
(permanent) for a refused model, bad settings or data, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import traceback

from lockstep import _native

# common/base/exit_codes.h's, through the native module: one definition.
EXIT_FAILURE = _native.EXIT_FAILURE
EXIT_PERMANENT = _native.EXIT_PERMANENT
EXIT_RETRYABLE = _native.EXIT_RETRYABLE
EXIT_TERMINATED = _native.EXIT_TERMINATED


class LockstepError(RuntimeError):
    """A Lockstep operation failed.

    Attributes:
      code: the status code as a number (gRPC's numbering).
      code_name: its name, e.g. "FAILED_PRECONDITION".
      message: what the server or client said.
      retryable: whether registering again may help.
      exit_code: the process exit code docs/faults.md gives this failure.
    """

    def __init__(self, code: int, code_name: str, message: str,
                 retryable: bool = False,
                 exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(f"{code_name}: {message}")
        self.code = code
        self.code_name = code_name
        self.message = message
        self.retryable = retryable
        self.exit_code = exit_code


def error(code_name: str, message: str) -> LockstepError:
    """A LockstepError of status `code_name` (e.g. "INVALID_ARGUMENT").

    Its number, retryability and exit code are the C++ worker's for that
    code (lockstep._native.status_fields), never written twice.
    """
    return LockstepError(*_native.status_fields(code_name, message))


def _exit_now(code):
    """Ends the process with `code`; a permanent failure first tells the
    servers (before_exit), which end the job rather than wait for it."""
    sys.stderr.flush()
    sys.stdout.flush()
    if code != EXIT_RETRYABLE:
        for leave in before_exit:
            try:
                leave()
            except Exception as e:  # pylint: disable=broad-except
                print(f"lockstep: could not leave the job: {e}",
                      file=sys.stderr)
        sys.stderr.flush()
    os._exit(code)


def _excepthook(kind, value, tb):
    """Prints the traceback as Python does, then exits with Lockstep's code."""
    traceback.print_exception(kind, value, tb)
    _exit_now(value.exit_code)


_previous_hook = None
_raised = None  # The last LockstepError a framework may have wrapped.
# ("failed" or "stopped", "Kind: message") of the uncaught exception that
# ends the process, for the job's last word to the servers.
fatal = None
# What to run before an uncaught LockstepError ends the process at once
# (os._exit skips atexit): the job's leave.
before_exit = []


def remember(error):
    """Notes `error` on its way out through a framework that wraps it.

    TensorFlow turns an exception raised inside tf.py_function into an
    UnknownError of its own; the exit code of the error that caused it is
    kept here for the exit hook.
    """
    global _raised
    _raised = error
    return error


def install_exit_codes():
    """Makes an uncaught LockstepError end the process with its exit_code.

    Other exceptions keep Python's own behaviour (exit code 1). Called when a
    job is joined, so a script launched by lockstep_launch or Kubernetes
    tells a retryable failure from a permanent one without code of its own.
    """
    global _previous_hook
    if _previous_hook is not None:
        return
    _previous_hook = sys.excepthook

    def hook(kind, value, tb):
        global fatal
        fatal = ("stopped" if issubclass(kind, KeyboardInterrupt) else
                 "failed", f"{kind.__name__}: {value}"[:1024])
        if isinstance(value, LockstepError):
            _excepthook(kind, value, tb)
        elif _raised is not None:
            # Another error, wrapping (or following) a LockstepError.
            traceback.print_exception(kind, value, tb)
            print(f"caused by lockstep.LockstepError: {_raised}",
                  file=sys.stderr)
            _exit_now(_raised.exit_code)
        else:
            _previous_hook(kind, value, tb)

    sys.excepthook = hook
